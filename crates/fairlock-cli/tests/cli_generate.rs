//! `fairlock generate`: the manual pages and the shell completions, as an installed binary
//! makes them (`cargo install` puts only the binary in PREFIX/bin) and as man and bash then
//! find them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

/// The subcommands that `fairlock --help` lists, each with a page of its own.
const SUBCOMMANDS: [&str; 6] = ["run", "lock", "unlock", "status", "demo", "generate"];

/// A fresh directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "fairlock-generate-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// A copy of the built binary at PREFIX/bin/fairlock, as `cargo install --root PREFIX` leaves it.
fn installed_binary(prefix: &Path) -> PathBuf {
    let bin = prefix.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let exe = bin.join("fairlock");
    fs::copy(BIN, &exe).unwrap();
    exe
}

/// `man` as a user with PREFIX/bin on PATH and no MANPATH runs it (man-db then looks in
/// PREFIX/share/man by itself).
fn man(prefix: &Path, args: &[&str]) -> Output {
    Command::new("man")
        .args(args)
        .env_remove("MANPATH")
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", prefix.join("bin").display()),
        )
        .env("MANWIDTH", "200")
        .output()
        .expect("man (man-db) must be installed: ci/deps.sh installs it")
}

#[test]
fn install_puts_the_pages_where_man_finds_them_next_to_the_binary() {
    let d = Dir::new("install");
    let exe = installed_binary(&d.0);
    let listed = ok(
        Command::new(&exe)
            .args(["generate", "--install"])
            .output()
            .unwrap(),
        "generate --install",
    );
    let page = d.0.join("share/man/man1/fairlock.1");
    assert!(listed.contains(page.to_str().unwrap()), "{listed}");
    let found = ok(man(&d.0, &["-w", "fairlock"]), "man -w fairlock");
    assert_eq!(found.trim(), page.to_str().unwrap());

    let main = ok(man(&d.0, &["-P", "cat", "fairlock"]), "man fairlock");
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "SUBCOMMANDS",
        "EXAMPLES",
        "EXIT STATUS",
    ] {
        assert!(
            main.contains(section),
            "no {section} in man fairlock:\n{main}"
        );
    }
    for sub in SUBCOMMANDS {
        assert!(
            main.contains(&format!("fairlock-{sub}(1)")),
            "{sub} missing:\n{main}"
        );
        let page = ok(
            man(&d.0, &["-P", "cat", &format!("fairlock-{sub}")]),
            &format!("man fairlock-{sub}"),
        );
        assert!(page.contains(&format!("fairlock {sub}")), "{page}");
    }
    // fairlock-run(1) documents every option `fairlock run --help` does, and the exit codes.
    let run = ok(
        man(&d.0, &["-P", "cat", "fairlock-run"]),
        "man fairlock-run",
    );
    let help = ok(
        Command::new(&exe).args(["run", "--help"]).output().unwrap(),
        "run --help",
    );
    // The long name of each option line ("  -n, --nonblock  Fail ..."), not its aliases.
    let longs: Vec<&str> = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .flat_map(|l| {
            l.split_whitespace()
                .take_while(|w| w.starts_with('-') || w.starts_with('<'))
                .filter(|w| w.starts_with("--"))
                .map(|w| w.trim_end_matches(','))
        })
        .collect();
    assert!(
        longs.contains(&"--lease") && longs.contains(&"--mode"),
        "{help}"
    );
    for long in longs {
        assert!(
            run.contains(long),
            "{long} is not in man fairlock-run:\n{run}"
        );
    }
    assert!(
        run.contains("EXIT STATUS") && run.contains("127 command not found"),
        "{run}"
    );
}

#[test]
fn install_writes_completions_that_bash_loads() {
    let d = Dir::new("bash");
    let exe = installed_binary(&d.0);
    ok(
        Command::new(&exe)
            .args(["generate", "--install", "--prefix"])
            .arg(&d.0)
            .output()
            .unwrap(),
        "generate --install --prefix",
    );
    for f in [
        "share/bash-completion/completions/fairlock",
        "share/zsh/site-functions/_fairlock",
        "share/fish/vendor_completions.d/fairlock.fish",
    ] {
        let script = fs::read_to_string(d.0.join(f)).unwrap();
        assert!(
            script.contains("fairlock") && script.contains("nonblock"),
            "{f}"
        );
    }
    // What bash's completion does on `fairlock ru<TAB>` and `fairlock run --le<TAB>`.
    let script = d.0.join("share/bash-completion/completions/fairlock");
    let out = ok(
        Command::new("bash")
            .args(["--norc", "--noprofile", "-c"])
            .arg(format!(
                "source '{}'
                 COMP_WORDS=(fairlock ru); COMP_CWORD=1; _fairlock fairlock ru fairlock
                 echo \"1:${{COMPREPLY[*]}}\"
                 COMP_WORDS=(fairlock run --le); COMP_CWORD=2; _fairlock fairlock --le run
                 echo \"2:${{COMPREPLY[*]}}\"",
                script.display()
            ))
            .output()
            .unwrap(),
        "bash completion",
    );
    assert!(out.contains("1:run\n"), "{out}");
    assert!(out.contains("2:--lease\n"), "{out}");
}

#[test]
fn generate_prints_the_page_and_each_shells_script() {
    let page = ok(
        Command::new(BIN)
            .args(["generate", "man"])
            .output()
            .unwrap(),
        "generate man",
    );
    assert!(
        page.starts_with(".ie") || page.contains(".TH FAIRLOCK 1"),
        "{page}"
    );
    let bash = ok(
        Command::new(BIN)
            .args(["generate", "bash"])
            .output()
            .unwrap(),
        "generate bash",
    );
    assert!(bash.contains("complete -F _fairlock"), "{bash}");
    let zsh = ok(
        Command::new(BIN)
            .args(["generate", "zsh"])
            .output()
            .unwrap(),
        "generate zsh",
    );
    assert!(zsh.starts_with("#compdef fairlock"), "{zsh}");
    let fish = ok(
        Command::new(BIN)
            .args(["generate", "fish"])
            .output()
            .unwrap(),
        "generate fish",
    );
    assert!(fish.contains("complete -c fairlock"), "{fish}");
}

#[test]
fn generate_refuses_nothing_to_do_and_names_what_it_cannot_write() {
    let none = Command::new(BIN).arg("generate").output().unwrap();
    assert_eq!(none.status.code(), Some(64), "{}", text(&none.stderr));
    let both = Command::new(BIN)
        .args(["generate", "man", "--install"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(64), "{}", text(&both.stderr));

    let d = Dir::new("blocked");
    let file = d.0.join("not-a-directory");
    fs::write(&file, "").unwrap();
    let o = Command::new(BIN)
        .args(["generate", "--install", "--prefix"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(66), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains(file.to_str().unwrap()) && err.contains("cannot create the directory"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn help_names_the_installed_manual() {
    let help = ok(Command::new(BIN).arg("--help").output().unwrap(), "--help");
    assert!(help.contains("man fairlock"), "{help}");
    assert!(help.contains("fairlock generate --install"), "{help}");
    assert!(!help.contains("docs/CLI.md"), "{help}");
}
