"""The Hugging Face Space tool: what a Space runs, written, rehearsed offline and uploaded.
Not part of the library's wheel (`pip install .` ships gumiho and its app only).

    python -m space_deploy your-name/gumiho --dry-run --out DIR
    python -m space_deploy your-name/gumiho --rehearse

* :mod:`.upload`: the command (docs/space.md): write, rehearse or upload;
* :mod:`.contents`: what the Space runs, the upload's files;
* :mod:`.rehearsal`: the upload installed wheels-only and started as a Space would, offline.
"""
