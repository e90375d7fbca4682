"""``python -m autograder.sandbox``: the grading stage (:func:`autograder.sandbox.stage.main`), run by the worker.

An entry of its own, so that the processes the stage spawns (the verdicts' checks) do not import it again.
"""

import sys

from autograder.sandbox.stage import main

sys.exit(main())
