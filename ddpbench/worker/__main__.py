import sys

from ddpbench.worker.main import main

sys.exit(main())
