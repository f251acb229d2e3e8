"""Run inside the container: every NVIDIA character node it has, as `PATH MAJOR:MINOR`, then, for
each path given as an argument (the model store's mount point), `PATH mounted read-only`, `PATH
mounted read-write` or `PATH not mounted`.

What the running container really got, not what its config says it should: entries in the config
apply at the container's start, so a run killed between writing them and the restart shows here.
"""
import glob
import os
import stat
import sys

for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")):
    info = os.stat(path)
    if stat.S_ISCHR(info.st_mode):
        print(path, "%d:%d" % (os.major(info.st_rdev), os.minor(info.st_rdev)))

with open("/proc/self/mountinfo", encoding="utf-8") as handle:
    # mount point (field 5) -> its own options (field 6); the last mount on a point is the one seen
    mounted = {}
    for line in handle:
        fields = line.split()
        point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
        mounted[point] = fields[5].split(",")
for path in sys.argv[1:]:
    options = mounted.get(os.path.normpath(path))
    print(path, "not mounted" if options is None else "mounted read-only" if "ro" in options else "mounted read-write")
