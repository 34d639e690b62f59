"""The one prompt reader (gumiho.files.prompt_files): the record shapes every command takes,
one error per kind of bad record, and the same file read alike by the bench and
distillation."""
import json

import pytest

from gumiho import GumihoError
from gumiho.bench import load_prompts
from gumiho.files.prompt_files import Conversation, PromptFileError, read_prompts
from gumiho.train.sources import distill
from helpers import ROOT


def write(tmp_path, text, name="p.jsonl"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def lines(*rows):
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def test_every_record_shape_and_its_labels(tmp_path):
    path = write(tmp_path, lines(
        {"id": "a", "source": "s", "prompt": "P"},
        {"question_id": 81, "category": "writing", "turns": ["T1", "T2"], "reference": ["ignored"]},
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                      {"role": "assistant", "content": "A"}, {"role": "human", "content": "U2"}]},
        "",
        {"turns": [{"role": "user", "content": "as messages"}], "system": "Be brief."},
        {"prompt": "x", "id": 7, "question_id": 8, "source": "first", "category": "second"},
    ))
    convs = read_prompts(path)
    assert all(isinstance(c, Conversation) for c in convs)
    assert [(c.id, c.source, c.user_turns, c.system) for c in convs] == [
        ("a", "s", ["P"], None),
        (81, "writing", ["T1", "T2"], None),  # MT-Bench's numeric ids stay numbers (the bench's records keep them)
        ("p:3", "p", ["U", "U2"], "S"),  # assistant messages dropped: the target writes its own replies
        ("p:5", "p", ["as messages"], "Be brief."),  # line 4 is blank and skipped, line numbers still count it
        (7, "first", ["x"], None),  # id before question_id, source before category
    ]


def test_txt_paragraphs_split_on_blank_and_whitespace_only_lines(tmp_path):
    path = write(tmp_path, "First paragraph\nstill first.\n\n\n\nSecond.\n \t \nThird\r\n\r\nFourth.\n\n",
                 name="notes.txt")
    convs = read_prompts(path)
    assert [c.user_turns for c in convs] == [["First paragraph\nstill first."], ["Second."], ["Third"], ["Fourth."]]
    assert [c.id for c in convs] == ["notes:0", "notes:1", "notes:2", "notes:3"] and convs[0].source == "notes"


MSG_FORMAT = r'each line must be one object like \{"prompt"'


@pytest.mark.parametrize("row, match", [
    # not JSON
    ('{"prompt": oops}', r"line 2: not valid JSON \(Expecting value at column 12\); " + MSG_FORMAT),
    ('{"prompt": "unterminated', r"line 2: not valid JSON"),
    # not an object
    ("[1, 2]", r'line 2: expected a JSON object like \{"prompt".*, got list'),
    ('"just a string"', r"line 2: expected a JSON object .*, got str"),
    # no prompt field
    ({"text": "x", "id": 1}, r'line 2: no "prompt", "turns" or "messages" field \(fields: "text", "id"\); '
                             + MSG_FORMAT),
    ({}, r'line 2: no "prompt", "turns" or "messages" field \(fields: none\)'),
    # empty prompt
    ({"prompt": ""}, r'line 2: "prompt" is empty; write the request there or remove the line'),
    ({"prompt": " \n\t"}, r'line 2: "prompt" is empty'),
    ({"turns": ["first", "  "]}, r'line 2: turn 1 of "turns" is empty'),
    ({"turns": []}, r'line 2: "turns" must be a non-empty list of strings'),
    ({"messages": []}, r'line 2: "messages" must be a non-empty list of \{"role", "content"\} messages'),
    ({"messages": [{"role": "user", "content": ""}]}, r'line 2: message 0 of "messages" is empty'),
    ({"messages": [{"role": "assistant", "content": "only me"}]}, r'line 2: "messages" has no user message'),
    # wrong types
    ({"prompt": 5}, r'line 2: "prompt" must be a string, got int'),
    ({"prompt": ["a list"]}, r'line 2: "prompt" must be a string, got list'),
    ({"turns": "not a list"}, r'line 2: "turns" must be a non-empty list of strings'),
    ({"turns": ["text", {"role": "user", "content": "mixed"}]}, r'line 2: "turns" must be a non-empty list'),
    ({"turns": [1, 2]}, r'line 2: "turns" must be a non-empty list'),
    ({"messages": "hi"}, r'line 2: "messages" must be a non-empty list'),
    ({"messages": [{"role": "user"}]}, r'line 2: message 0 of "messages" needs "role" and "content"'),
    ({"messages": ["hi"]}, r'line 2: message 0 of "messages" needs "role" and "content"'),
    ({"messages": [{"role": "user", "content": 3}]}, r'line 2: message 0 of "messages" must be a string, got int'),
    ({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": None}]},
     r'line 2: message 1 of "messages" content must be a string, got NoneType'),
    ({"messages": [{"role": "robot", "content": "x"}]}, r"line 2: message 0 of \"messages\" has the unknown role "
                                                        r"'robot'; use system, user, human, assistant"),
    ({"messages": [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}]},
     r"line 2: message 1 of \"messages\" is a system message; one is allowed only first"),
    ({"prompt": "p", "system": 1}, r'line 2: "system" must be a string, got int'),
    ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "system": "t"},
     r'line 2: both a "system" field and a system message'),
    ({"prompt": "p", "id": [1]}, r'line 2: "id" must be a string or a whole number, got \[1\]'),
    ({"prompt": "p", "question_id": True}, r'line 2: "question_id" must be a string or a whole number, got True'),
    ({"prompt": "p", "question_id": 1.5}, r'line 2: "question_id" must be a string or a whole number'),
    ({"prompt": "p", "source": 3}, r'line 2: "source" must be a string, got 3'),
    ({"prompt": "p", "category": None}, r'line 2: "category" must be a string, got None'),
    # text a tokenizer cannot take (JSON's \ud800 escape decodes to a lone surrogate)
    ('{"prompt": "broken \\ud800 escape"}', r'line 2: "prompt" holds an invalid character at position 7'),
])
def test_each_bad_record_is_refused_with_its_line_and_what_is_wrong(tmp_path, row, match):
    path = write(tmp_path, lines({"prompt": "a fine first line"}, row))
    with pytest.raises(PromptFileError, match=match) as info:
        read_prompts(path)
    assert str(info.value).startswith(f"{path}, line 2: ")
    assert "\n" not in str(info.value)  # one line, as the commands print it after "error: "


@pytest.mark.parametrize("name, text, match", [
    ("e.jsonl", "", r"has no prompts; add lines like \{\"prompt\""),
    ("e.jsonl", "\n  \n\n", r"has no prompts"),
    ("e.json", "\n", r"has no prompts"),
    ("e.txt", "", r"has no prompts; add a paragraph of text"),
    ("e.txt", "  \n\n \t\n", r"has no prompts; add a paragraph of text"),  # a .txt of empty lines only
])
def test_empty_files(tmp_path, name, text, match):
    with pytest.raises(PromptFileError, match=match):
        read_prompts(write(tmp_path, text, name))


def test_missing_folder_unsupported_and_undecodable_files(tmp_path):
    with pytest.raises(PromptFileError, match=r"nope\.jsonl does not exist; give a \.jsonl file"):
        read_prompts(tmp_path / "nope.jsonl")
    with pytest.raises(PromptFileError, match="No prompt file given"):
        read_prompts("")
    with pytest.raises(PromptFileError, match="is a folder; give a .jsonl or .txt file inside it"):
        read_prompts(tmp_path)
    with pytest.raises(PromptFileError, match=r"unsupported type '\.csv'; use \.jsonl"):
        read_prompts(write(tmp_path, "a,b\n", "p.csv"))
    with pytest.raises(PromptFileError, match=r"unsupported type '\(none\)'"):
        read_prompts(write(tmp_path, '{"prompt": "x"}\n', "noext"))
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(PromptFileError, match="is not UTF-8 text .*; save it as UTF-8"):
        read_prompts(bad)


def test_the_error_is_a_gumiho_error_and_every_command_refuses_alike(tmp_path, capsys, monkeypatch):
    """The bench and distillation read the same file the same way and print the same message."""
    assert issubclass(PromptFileError, GumihoError)
    import gumiho.loading
    monkeypatch.setattr(gumiho.loading, "load_target", lambda *a, **k: pytest.fail("model must not be loaded"))
    from gumiho import bench

    path = write(tmp_path, lines({"prompt": "ok"}, {"turns": ["  "]}))
    expected = f'{path}, line 2: turn 0 of "turns" is empty'
    assert bench.main(["--prompts", str(path)]) == 2
    assert expected in capsys.readouterr().err
    assert distill.main(["--prompts", str(path), "--out", str(tmp_path / "o")]) == 2
    assert expected in capsys.readouterr().err


def test_the_bench_reads_every_shape_and_keeps_its_record_fields(tmp_path):
    path = write(tmp_path, lines({"question_id": 81, "category": "writing", "turns": ["Write.", "Again."]},
                                 {"id": "x", "source": "code", "prompt": "Code."},
                                 {"messages": [{"role": "system", "content": "Sys."},
                                               {"role": "user", "content": "Hi."}]}))
    ps = load_prompts(str(path))
    assert [(p.question_id, p.category, p.text, p.system) for p in ps] == [
        (81, "writing", "Write.", None), ("x", "code", "Code.", None), ("p:3", "p", "Hi.", "Sys.")]


def test_every_shipped_prompt_file_reads():
    """The benchmark sets and the corpus (what the commands are run on) pass the reader."""
    files = sorted((ROOT / "benchmarks/prompts").glob("*.jsonl")) + sorted((ROOT / "corpus/prompts").glob("*.jsonl"))
    assert len(files) >= 8
    for f in files:
        convs = read_prompts(f)
        assert convs and all(c.user_turns and all(t.strip() for t in c.user_turns) for c in convs)
    mt = read_prompts(ROOT / "benchmarks/prompts/mt_bench.jsonl")
    assert isinstance(mt[0].id, int) and mt[0].source == "writing" and len(mt[0].user_turns) == 2


def test_probe_sets_read_and_keep_apart_from_the_six_sets():
    """The probe sets (translation, passage-grounded answers, summaries) read as bench
    prompts, with ids of their own, and share no 8-word run with a benchmark prompt or
    a corpus prompt: they judge drafters on kinds of request nothing here trains on."""
    probes = {f.stem: read_prompts(f) for f in sorted((ROOT / "benchmarks/probe").glob("*.jsonl"))}
    assert set(probes) == {"translation", "passage", "summary"}
    ids = [c.id for convs in probes.values() for c in convs]
    assert len(ids) == len(set(ids)) == 36
    assert all(c.source == name for name, convs in probes.items() for c in convs)
    from gumiho.train.sources.taxonomy import banned_shingles, shingles  # the corpus's 8-word rule
    others = banned_shingles([str(f) for d in ("benchmarks/prompts", "corpus/prompts")
                              for f in sorted((ROOT / d).glob("*.jsonl"))])
    shared = [c.id for convs in probes.values() for c in convs if shingles(c.user_turns[0]) & others]
    assert shared == []
