"""``python -m space_deploy NAME ...``: see space_deploy.upload."""
import sys

from .upload import main

sys.exit(main())
