# sqlite3 CLI: 100k rows inserted, indexed and queried in an on-disk database.
set -e
command -v sqlite3 >/dev/null || { echo "missing: sqlite3" >&2; exit 77; }
$RUN sqlite3 -batch test.db < "$DROPIN/sqlite.sql"
