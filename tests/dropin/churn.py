# churn.py — dict, string, set and list churn for the python3 drop-in test.
# Deterministic (run with PYTHONHASHSEED=0): prints counts and digests only, so
# the output with and without ebb must be identical. PYTHONMALLOC=malloc sends
# every object, not only the large ones, through malloc.
import hashlib
import json
import threading

def lcg(seed):
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield x >> 33

def digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]

def dict_churn(seed, n):
    rnd = lcg(seed)
    d = {}
    for i in range(n):
        k = "k%x" % (next(rnd) % (n // 2))
        v = next(rnd)
        if v % 5 == 0 and k in d:
            del d[k]
        else:
            d[k] = [v, str(v) * (1 + v % 7), {"i": i}]
    # grow and shrink a second dict built from the first, so resizes go both ways
    e = {k: v[1] for k, v in d.items() if len(v[1]) % 2}
    for k in list(e)[::2]:
        del e[k]
    return len(d), len(e), digest(sorted(e.items()))

def string_churn(seed, n):
    rnd = lcg(seed)
    parts = []
    for _ in range(n):
        w = "".join(chr(97 + next(rnd) % 26) for _ in range(1 + next(rnd) % 12))
        parts.append(w.upper() if next(rnd) % 3 == 0 else w)
    text = " ".join(parts)
    words = text.split()
    big = [text[i:] + text[:i] for i in range(0, len(text), max(1, len(text) // 8))]
    joined = "|".join(sorted(set(words)))
    return len(text), len(set(words)), sum(len(b) for b in big), hashlib.sha256(joined.encode()).hexdigest()[:16]

def set_churn(seed, n):
    rnd = lcg(seed)
    a = {next(rnd) % (4 * n) for _ in range(n)}
    b = {next(rnd) % (4 * n) for _ in range(n)}
    return len(a | b), len(a & b), len(a ^ b), sum(sorted(a - b)[:100])

def big_blocks(seed):
    # megabyte-sized strings and lists: ebb's large-block path
    rnd = lcg(seed)
    out = []
    for i in range(24):
        s = ("%d," % next(rnd)) * (50000 + i * 10000)
        lst = list(range(100000 + i * 5000))
        out.append((len(s), sum(lst[::97])))
        del s, lst
    return out

def threaded(n_threads, n):
    # objects made in one thread are freed in another: cross-thread frees
    results = [None] * n_threads
    shared = []
    lock = threading.Lock()

    def work(t):
        local = dict_churn(100 + t, n)
        with lock:
            shared.append(["x" * (t + 1) * 100 for _ in range(500)])
            if len(shared) > 2:
                shared.pop(0)
        results[t] = local

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results

print("dict", dict_churn(1, 200000))
print("string", string_churn(2, 100000))
print("set", set_churn(3, 200000))
print("big", big_blocks(4))
for r in threaded(4, 50000):
    print("thread", r)
print("json", digest({str(i): [i, str(i) * 3] for i in range(50000)}))
