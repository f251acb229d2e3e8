"""Run inside the container: every NVIDIA character node it has, as `PATH MAJOR:MINOR`.

What the running container really got, not what its config says it should.
"""
import glob
import os
import stat

for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")):
    info = os.stat(path)
    if stat.S_ISCHR(info.st_mode):
        print(path, "%d:%d" % (os.major(info.st_rdev), os.minor(info.st_rdev)))
