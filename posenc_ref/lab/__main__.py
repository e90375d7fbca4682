"""``python -m posenc_ref.lab``: the command line of :mod:`posenc_ref.lab.cli`."""

import sys

from posenc_ref.lab.cli import main

if __name__ == "__main__":
    main(sys.argv[1:])
