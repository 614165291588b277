# perl: hash and string churn.
set -e
command -v perl >/dev/null || { echo "missing: perl" >&2; exit 77; }
$RUN perl "$DROPIN/churn.pl"
