//! A matrix of tests: one `#[test]` a case, each calling the file's runner with the case's name
//! and arguments.

/// One `#[test]` a case, named for it, calling `$run(name, args...)`:
///
/// ```text
/// waffle_testkit::test_cases! { run;
///     delete_4k: "delete", 4096;
///     wal_4k: "wal", 4096;
/// }
/// ```
#[macro_export]
macro_rules! test_cases {
    ($run:ident; $($name:ident: $($arg:expr),+;)*) => {$(
        #[test]
        fn $name() {
            $run(stringify!($name), $($arg),+);
        }
    )*};
}
