from ddpbench.worker.main import main
from ddpbench.worker.teardown import exit_now

# Past finalization: see worker/teardown.py (a failure raises out of main and exits as usual).
exit_now(main())
