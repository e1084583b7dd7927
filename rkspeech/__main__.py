import sys

from rkspeech.cli import main

sys.exit(main())
