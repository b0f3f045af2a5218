/*
** Compiled into SQLite's testfixture by scripts/sqlite-suite with
** -DSQLITE_EXTRA_INIT=waffle_suite_init: SQLite calls it at the end of every
** successful sqlite3_initialize().
**
** With WAFFLE_SUITE_SO set, it loads that libwaffle.so once and makes the
** `waffle` VFS the default, so every test that opens a database without
** naming a VFS goes through waffle. Without it, it does nothing (the plain
** run the waffle run is compared with).
**
** It runs again after each sqlite3_shutdown()/sqlite3_initialize() pair the
** tests do, and sqlite3_os_init() then makes "unix" the default again: so the
** extension is loaded only once, but waffle is made the default every time.
*/
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

int waffle_suite_init(const char *unused){
  static int loaded = 0;   /* the extension is in and its VFS registered */
  static int busy = 0;     /* guards against re-entry through sqlite3_open */
  const char *so = getenv("WAFFLE_SUITE_SO");
  sqlite3_vfs *vfs;
  (void)unused;
  if( so==0 || so[0]==0 || busy ) return SQLITE_OK;
  busy = 1;
  if( !loaded ){
    sqlite3 *db = 0;
    char *err = 0;
    int rc = sqlite3_open_v2(":memory:", &db,
                             SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, 0);
    if( rc==SQLITE_OK ){
      rc = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 1, 0);
    }
    if( rc==SQLITE_OK ){
      rc = sqlite3_load_extension(db, so, "sqlite3_waffle_init", &err);
    }
    if( rc!=SQLITE_OK ){
      /* Never fall back to a plain run when waffle was asked for: that
      ** would report SQLite's results as waffle's. */
      fprintf(stderr, "waffle_suite_init: cannot load %s: %s\n", so,
              err ? err : (db ? sqlite3_errmsg(db) : "open failed"));
      exit(99);
    }
    sqlite3_close(db);
    loaded = 1;
  }
  vfs = sqlite3_vfs_find("waffle");
  if( vfs==0 || sqlite3_vfs_register(vfs, 1)!=SQLITE_OK ){
    fprintf(stderr, "waffle_suite_init: no `waffle` VFS after loading %s\n", so);
    exit(99);
  }
  busy = 0;
  return SQLITE_OK;
}
