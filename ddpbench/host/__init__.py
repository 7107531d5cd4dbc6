"""What this machine is and how busy it is: read by the launcher before a run and by every rank
during it. Below both `ddpbench.running` and `ddpbench.worker`, so neither reaches into the other
for it. No torch at import time."""
