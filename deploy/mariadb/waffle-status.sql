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
-- with WAFFLE_STATS_FILE elsewhere, change the path below (it must be inside
-- secure_file_priv if that is set). NULL everywhere means the file cannot be
-- read: none yet (Waffle not loaded, or the server has not opened a
-- tablespace), secure_file_priv, or larger than max_allowed_packet.

CREATE DATABASE IF NOT EXISTS waffle;

CREATE OR REPLACE DEFINER = CURRENT_USER FUNCTION waffle.stats_json() RETURNS LONGTEXT
  SQL SECURITY DEFINER NOT DETERMINISTIC READS SQL DATA
  COMMENT 'The Waffle preload''s stats file (JSON), read with the definer''s FILE privilege'
  RETURN LOAD_FILE(CONCAT(@@datadir, 'waffle-stats.json'));

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
  JSON_VALUE(s.j, '$.switch.control_file') AS off_switch_file
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
