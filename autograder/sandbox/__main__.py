"""``python -m autograder.sandbox``: the grading stage (:func:`autograder.sandbox.stage.main`), run by the worker.

An entry of its own, so that the processes the stage spawns (the verdicts' checks) do not import it again.
"""

import sys

from autograder.sandbox import phases
from autograder.sandbox.stand_ins import check_nbgrader_schemas_once, stand_in_for_nbgrader_server_extensions

phases.mark("main")  # before the stage's imports, which the profile counts apart (autograder.sandbox.phases)
# jsonschema, which nbformat imports, registers an IRI format checker when rfc3987_syntax is installed (as
# jupyter-events' dependencies install it), and importing that module builds its grammar: 1.7 s of every
# stage's start, for a format that no schema the stage validates uses. Marked absent, it is not imported and
# jsonschema leaves that one format unchecked.
sys.modules.setdefault("rfc3987_syntax", None)
stand_in_for_nbgrader_server_extensions()
check_nbgrader_schemas_once()

if sys.argv[1:2] == ["--warm"]:  # the server of warm stages (autograder.sandbox.warm_stage)
    from autograder.sandbox.warm_stage import serve

    serve(int(sys.argv[2]))
else:
    from autograder.sandbox.stage import main

    main()
