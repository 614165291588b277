# python3: dict/string/set churn, every object through malloc (PYTHONMALLOC=malloc).
set -e
command -v /usr/bin/python3 >/dev/null || { echo "missing: python3" >&2; exit 77; }
PYTHONHASHSEED=0 PYTHONMALLOC=malloc $RUN /usr/bin/python3 "$DROPIN/churn.py"
