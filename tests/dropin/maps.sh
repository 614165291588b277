# Proof that malloc is ebb's inside a preloaded python3 (run with ebb only): the
# mapping of libebb.so in /proc/self/maps, then ebb_owns (exported by libebb.so)
# asked about a block from malloc as python's ctypes resolves it, and about a
# python string, which PYTHONMALLOC=malloc allocates with malloc.
set -e
PYTHONMALLOC=malloc $RUN /usr/bin/python3 -c '
import ctypes, os
maps = [l.split()[-1] for l in open("/proc/self/maps") if l.rstrip().endswith("/libebb.so")]
print("mapped", os.path.realpath(maps[0]) if maps else "nothing")
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.ebb_owns.argtypes = [ctypes.c_void_p]
p = libc.malloc(100)
print("malloc", libc.ebb_owns(p))
s = "x" * 1000 + str(os.getpid())
print("str", libc.ebb_owns(id(s)))
'
