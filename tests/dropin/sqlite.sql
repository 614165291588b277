-- sqlite.sql: the sqlite3 drop-in test. Deterministic data (no random()), so the
-- output with and without ebb must be identical.
PRAGMA cache_size = -32000;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL, blob BLOB);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
INSERT INTO t SELECT x, (x * 7919) % 1000, printf('name-%06d-%s', (x * 104729) % 100003, substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26)),
  (x % 977) * 1.5, zeroblob(x % 300)
FROM c;
COMMIT;
CREATE INDEX t_grp ON t(grp, val);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(grp), total(val), sum(length(blob)) FROM t;
SELECT grp, count(*), round(avg(val), 3), max(name) FROM t GROUP BY grp ORDER BY count(*) DESC, grp LIMIT 10;
SELECT id, name FROM t WHERE name LIKE 'name-0500%' ORDER BY name LIMIT 5;
SELECT count(*) FROM t a JOIN t b ON a.grp = b.grp AND b.id = a.id + 1000;
SELECT group_concat(name, ',') FROM (SELECT name FROM t WHERE grp = 7 ORDER BY val DESC, id LIMIT 20);
UPDATE t SET name = name || '-updated' WHERE id % 10 = 0;
DELETE FROM t WHERE grp < 100;
SELECT count(*), sum(length(name)) FROM t;
SELECT grp, group_concat(id) FROM (SELECT grp, id FROM t WHERE grp BETWEEN 500 AND 502 ORDER BY id LIMIT 30) GROUP BY grp;
VACUUM;
PRAGMA integrity_check;
