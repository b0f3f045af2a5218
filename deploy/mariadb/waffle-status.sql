-- Waffle's status from SQL: views over the preload's stats file, read with
-- LOAD_FILE(). MariaDB has no hook a preload could use for a status variable
-- or an information_schema table, but the server can read the file itself.
--
--   mariadb < deploy/mariadb/waffle-status.sql        # once, as root
--   SELECT * FROM waffle.status;                      # one row
--   SELECT * FROM waffle.tablespaces ORDER BY page_reads DESC LIMIT 10;
--   SELECT JSON_DETAILED(waffle.stats_json());        # everything
--   GRANT SELECT, EXECUTE ON waffle.* TO 'monitor'@'localhost';
--
-- LOAD_FILE needs the FILE privilege: waffle.stats_json() runs with its
-- definer's (root's, who runs this script), so a user with SELECT and EXECUTE
-- on the schema `waffle` reads the stats without FILE. The file is read
-- where the preload writes it by default, waffle-stats.json in the datadir;
-- with WAFFLE_STATS_FILE elsewhere, change waffle.stats_path() below (it must
-- be inside secure_file_priv if that is set); with WAFFLE_CONFIG elsewhere,
-- waffle.config_path().
--
-- When the file cannot be read, every column of waffle.status is NULL but
-- the last, why_null, which says why and what to do (waffle.stats_why()):
-- not readable by every user (WAFFLE_STATS_MODE unset: 0660), not written
-- yet, outside secure_file_priv, larger than max_allowed_packet, not a stats
-- file, or a definer without the FILE privilege. LOAD_FILE() itself only
-- returns NULL, so the function looks where it can: the server's variables,
-- the definer's privileges, and the WAFFLE_STATS_MODE of the configuration
-- file (to LOAD_FILE a missing file and an unreadable one look the same; the
-- mode the preload was told to use tells them apart).

CREATE DATABASE IF NOT EXISTS waffle;

-- Where the stats file and the configuration file are: edit these two if
-- WAFFLE_STATS_FILE or WAFFLE_CONFIG name other files.
CREATE OR REPLACE DEFINER = CURRENT_USER FUNCTION waffle.stats_path() RETURNS VARCHAR(4096)
  SQL SECURITY DEFINER NOT DETERMINISTIC NO SQL
  COMMENT 'Where the preload writes its stats file (WAFFLE_STATS_FILE; default waffle-stats.json in the datadir)'
  RETURN CONCAT(@@datadir, 'waffle-stats.json');

CREATE OR REPLACE DEFINER = CURRENT_USER FUNCTION waffle.config_path() RETURNS VARCHAR(4096)
  SQL SECURITY DEFINER NOT DETERMINISTIC NO SQL
  COMMENT 'The preload''s configuration file (WAFFLE_CONFIG), read by waffle.stats_why() for WAFFLE_STATS_MODE'
  RETURN '/etc/waffle/waffle.conf';

DELIMITER //

-- The stats file, or NULL if it cannot be read or is not a stats file (a
-- foreign JSON file at the name must not pass for Waffle's status).
CREATE OR REPLACE DEFINER = CURRENT_USER FUNCTION waffle.stats_json() RETURNS LONGTEXT
  SQL SECURITY DEFINER NOT DETERMINISTIC READS SQL DATA
  COMMENT 'The Waffle preload''s stats file (JSON), read with the definer''s FILE privilege'
BEGIN
  DECLARE j LONGTEXT;
  -- Larger than max_allowed_packet: NULL like any file LOAD_FILE() cannot
  -- read (waffle.stats_why() says why), not an error that fails the query.
  DECLARE CONTINUE HANDLER FOR 1301 SET j = NULL;
  SET j = LOAD_FILE(waffle.stats_path());
  RETURN IF(JSON_VALID(j) AND JSON_VALUE(j, '$.format') = 'waffle-stats', j, NULL);
END//

-- Why waffle.stats_json() is NULL, and the fix; NULL when it is not.
CREATE OR REPLACE DEFINER = CURRENT_USER FUNCTION waffle.stats_why() RETURNS TEXT
  SQL SECURITY DEFINER NOT DETERMINISTIC READS SQL DATA
  COMMENT 'Why the Waffle views are NULL, and what to do'
BEGIN
  DECLARE path VARCHAR(4096) DEFAULT waffle.stats_path();
  DECLARE conf_path VARCHAR(4096) DEFAULT waffle.config_path();
  DECLARE priv VARCHAR(4096) DEFAULT IFNULL(@@secure_file_priv, '');
  DECLARE j, conf LONGTEXT;
  DECLARE mode VARCHAR(16);
  DECLARE too_big BOOL DEFAULT FALSE;
  -- ER_WARN_ALLOWED_PACKET_OVERFLOWED, LOAD_FILE()'s only word on a NULL.
  DECLARE CONTINUE HANDLER FOR 1301 SET too_big = TRUE;
  SET j = LOAD_FILE(path);
  IF j IS NOT NULL THEN
    IF JSON_VALID(j) AND JSON_VALUE(j, '$.format') = 'waffle-stats' THEN
      RETURN NULL;
    END IF;
    RETURN CONCAT(path, ' is not a Waffle stats file (no "format": "waffle-stats"): another program''s ',
      'file at that name, which the preload leaves alone (one warning in the error log) and writes no stats ',
      'over. Move it away, or set WAFFLE_STATS_FILE in ', conf_path, ' to a free name, point ',
      'waffle.stats_path() at it and restart the server');
  END IF;
  IF NOT EXISTS (SELECT 1 FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE = 'FILE'
      AND GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''',
                           SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')) THEN
    RETURN CONCAT('cannot read ', path, ': LOAD_FILE() needs the FILE privilege, and these views read with ',
      'their definer''s, ', CURRENT_USER(), ', who has none: run deploy/mariadb/waffle-status.sql again as ',
      'root (or GRANT FILE ON *.* TO the definer)');
  END IF;
  IF priv <> '' AND LEFT(path, CHAR_LENGTH(priv)) <> priv THEN
    RETURN CONCAT('cannot read ', path, ': secure_file_priv is ', priv, ' and LOAD_FILE() reads no file ',
      'outside it: set WAFFLE_STATS_FILE = ', priv, 'waffle-stats.json in ', conf_path, ' (the directory ',
      'must be writable by the server''s user), point waffle.stats_path() at it and restart the server');
  END IF;
  IF too_big THEN
    RETURN CONCAT('cannot read ', path, ': it is larger than max_allowed_packet (', @@max_allowed_packet,
      ' bytes), the most LOAD_FILE() returns: raise max_allowed_packet in the server''s [mysqld] section ',
      '(a stats file takes about 400 bytes per tablespace)');
  END IF;
  SET conf = LOAD_FILE(conf_path);
  IF conf IS NULL THEN
    RETURN CONCAT('cannot read ', path, ': it is not readable by every user, as LOAD_FILE() requires, or ',
      'it does not exist yet, and ', conf_path, ' (waffle.config_path()) cannot be read to tell which. ',
      'Set WAFFLE_STATS_MODE = 0644 in the preload''s configuration file and restart the server (without ',
      'it the file is made 0660, as ibdata1); if it stays NULL, Waffle is not loaded (LD_PRELOAD) or ',
      'WAFFLE_STATS_FILE names another file: point waffle.stats_path() at it');
  END IF;
  -- The configuration file's grammar: the key in either case, a value maybe quoted.
  SET mode = REGEXP_SUBSTR(REGEXP_SUBSTR(conf, '(?mi)^[ \t]*waffle_stats_mode[ \t]*=[ \t]*["'']?[0-7]+'),
                           '[0-7]+$');
  IF IFNULL(mode, '') = '' OR CONV(mode, 8, 10) & 4 = 0 THEN
    RETURN CONCAT('cannot read ', path, ': LOAD_FILE() reads only a file every user may read, and ',
      conf_path, IF(IFNULL(mode, '') = '',
        ' sets no WAFFLE_STATS_MODE, so the preload makes the file as ibdata1 (0660)',
        CONCAT(' sets WAFFLE_STATS_MODE = ', mode)),
      ': set WAFFLE_STATS_MODE = 0644 there and restart the server (the file names databases, ',
      'tablespaces and grid nodes, and holds counters; no row data)');
  END IF;
  RETURN CONCAT('cannot read ', path, ': no such file yet (', conf_path, ' sets WAFFLE_STATS_MODE = ', mode,
    ', which LOAD_FILE() may read). The preload writes it at the server''s start and every second after; ',
    'if it never appears, Waffle is not loaded (LD_PRELOAD in the server''s environment: systemctl show ',
    'mariadb -p Environment; the error log''s "waffle:" lines) or WAFFLE_STATS_FILE names another file: ',
    'point waffle.stats_path() at it. A directory on the way that the server''s user cannot enter looks ',
    'the same');
END//

DELIMITER ;

-- One row: whether Waffle is on, and where reads were answered since the start.
CREATE OR REPLACE DEFINER = CURRENT_USER SQL SECURITY DEFINER VIEW waffle.status AS
SELECT
  JSON_VALUE(s.j, '$.state') AS state,
  JSON_VALUE(s.j, '$.switch.state') AS switch,
  JSON_VALUE(s.j, '$.disabled_reason') AS disabled_reason,
  FROM_UNIXTIME(JSON_VALUE(s.j, '$.updated_unix_ms') / 1000) AS updated,
  JSON_VALUE(s.j, '$.grid') AS grid,
  CAST(JSON_VALUE(s.j, '$.l1.capacity_bytes') AS UNSIGNED) AS l1_capacity_bytes,
  CAST(JSON_VALUE(s.j, '$.l1.pages') AS UNSIGNED) AS l1_pages,
  CAST(JSON_VALUE(s.j, '$.l1_hits') AS UNSIGNED) AS l1_hits,
  CAST(JSON_VALUE(s.j, '$.l2_hits') AS UNSIGNED) AS grid_hits,
  CAST(JSON_VALUE(s.j, '$.disk_reads') AS UNSIGNED) AS disk_reads,
  CAST(JSON_VALUE(s.j, '$.l2_pushes') AS UNSIGNED) AS grid_pushes,
  CAST(JSON_VALUE(s.j, '$.preload.page_reads') AS UNSIGNED) AS page_reads,
  CAST(JSON_VALUE(s.j, '$.preload.page_writes') AS UNSIGNED) AS page_writes,
  JSON_VALUE(s.j, '$.working_set.advice') AS advice,
  JSON_VALUE(s.j, '$.cache_id') AS cache_id,
  JSON_VALUE(s.j, '$.config_file') AS config_file,
  JSON_VALUE(s.j, '$.switch.control_file') AS off_switch_file,
  waffle.stats_why() AS why_null
FROM (SELECT waffle.stats_json() AS j) AS s;

-- A row per tablespace the server opened since the start (the stats file's "tablespaces").
CREATE OR REPLACE DEFINER = CURRENT_USER SQL SECURITY DEFINER VIEW waffle.tablespaces AS
SELECT
  t.name,
  JSON_EXTRACT(s.j, CONCAT('$.tablespaces."', t.name, '".cached')) = 'true' AS cached,
  CAST(JSON_VALUE(s.j, CONCAT('$.tablespaces."', t.name, '".reads')) AS UNSIGNED) AS page_reads,
  CAST(JSON_VALUE(s.j, CONCAT('$.tablespaces."', t.name, '".l1_hits')) AS UNSIGNED) AS l1_hits,
  CAST(JSON_VALUE(s.j, CONCAT('$.tablespaces."', t.name, '".l2_hits')) AS UNSIGNED) AS grid_hits,
  CAST(JSON_VALUE(s.j, CONCAT('$.tablespaces."', t.name, '".disk_reads')) AS UNSIGNED) AS disk_reads,
  CAST(JSON_VALUE(s.j, CONCAT('$.tablespaces."', t.name, '".page_writes')) AS UNSIGNED) AS page_writes,
  JSON_VALUE(s.j, CONCAT('$.tablespaces."', t.name, '".hit_ratio')) AS hit_ratio
FROM (SELECT waffle.stats_json() AS j) AS s,
  JSON_TABLE(JSON_KEYS(s.j, '$.tablespaces'), '$[*]' COLUMNS (name VARCHAR(512) PATH '$')) AS t;
