# git: init, add and commit a few hundred generated files in three commits, log,
# gc and fsck. Fixed identities and dates make the commit ids reproducible, so
# they are part of the compared output.
set -e
command -v git >/dev/null || { echo "missing: git" >&2; exit 77; }
export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=ebb GIT_AUTHOR_EMAIL=ebb@example.org \
  GIT_COMMITTER_NAME=ebb GIT_COMMITTER_EMAIL=ebb@example.org TZ=UTC LC_ALL=C
gen() { # gen FILES LINES SALT: writes src/fNNN.txt
  mkdir -p src
  awk -v files="$1" -v lines="$2" -v salt="$3" 'BEGIN {
    for (f = 0; f < files; f++) {
      name = sprintf("src/f%03d.txt", f)
      for (l = 0; l < lines; l++) printf "%d line %d of file %d: %08x\n", salt, l, f, (f * 2654435761 + l * 40503 + salt) % 4294967296 > name
      close(name)
    } }'
}
$RUN git init -q -b main repo
cd repo
for c in 1 2 3; do
  gen $((100 * c)) $((20 + 10 * c)) $c
  export GIT_AUTHOR_DATE="2024-01-0$c 12:00:00 +0000" GIT_COMMITTER_DATE="2024-01-0$c 12:00:00 +0000"
  $RUN git add -A
  $RUN git commit -q -m "commit $c: $((100 * c)) files"
done
$RUN git log --stat --format='%H %an %ad %s' | head -n 40
$RUN git log -p --format=%H | md5sum
$RUN git diff --stat HEAD~2 HEAD | tail -n 1
$RUN git gc -q --aggressive
$RUN git fsck --full --strict
$RUN git count-objects -v | grep -E '^(count|in-pack|packs):'
$RUN git rev-parse HEAD HEAD^{tree}
