#!/usr/bin/env python
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # run from anywhere: the project's folder, then the repository (for django_blueque)
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
