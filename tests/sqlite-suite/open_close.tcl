# What one open and close (or one small transaction) costs, plainly and under
# waffle: docs/benchmarks.md, "what an open and a close cost". Run with the
# suite's testfixture (target/sqlite-suite, built by scripts/sqlite-suite) in a
# scratch directory, once plainly and once with the suite's waffle environment
# (WAFFLE_SUITE_SO=target/release/libwaffle.so, WAFFLE_GRID=two nodes,
# WAFFLE_LOCAL=64KiB), under `strace -f -c`, for N=200 and N=0: the difference
# divided by 200 is one open's calls.
#
# usage: testfixture open_close.tcl MODE N   MODE: open | openq (open, SELECT, close) | txn
set mode [lindex $argv 0]; set n [lindex $argv 1]
file delete -force t.db t.db-journal
sqlite3 db t.db
db eval {CREATE TABLE t(a,b); INSERT INTO t VALUES(1,randomblob(100));}
db close
puts "MARK-START"; flush stdout
set t0 [clock microseconds]
if {$mode eq "open"} {
  for {set i 0} {$i < $n} {incr i} { sqlite3 db t.db; db close }
} elseif {$mode eq "openq"} {
  for {set i 0} {$i < $n} {incr i} { sqlite3 db t.db; db eval {SELECT count(*) FROM t}; db close }
} elseif {$mode eq "txn"} {
  sqlite3 db t.db
  for {set i 0} {$i < $n} {incr i} { db eval {INSERT INTO t VALUES($i, 'x')} }
  db close
}
set t1 [clock microseconds]
puts "MARK-END"; flush stdout
puts "$mode $n: [expr {($t1-$t0)/double($n)}] us each"
