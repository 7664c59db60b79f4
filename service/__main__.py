import sys

# kio imports hypothesis when it is installed, for property-test strategies no broker or
# command uses: 0.3 s of every start where the test dependencies are installed.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from service.cli.main import main  # noqa: E402 - after the line above, which kio's import reads

raise SystemExit(main())
