//! `fairlock generate`: the manual pages and the shell completions, made from the command
//! line's own definitions (clap), printed or installed under a prefix next to the binary, so
//! that an installed `fairlock` (`cargo install`, which installs only the binary) carries its
//! documentation with it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args, Command, ValueEnum};
use clap_complete::Shell;
use roff::{Roff, bold, roman};

use crate::exit::{self, Failure};
use crate::stdout;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["target", "install"])))]
pub struct GenerateArgs {
    /// What to print on stdout: the manual page fairlock(1) (roff), or the completion script
    /// of a shell.
    #[arg(value_enum, value_name = "WHAT")]
    pub target: Option<Target>,
    /// Write every manual page and the bash, zsh and fish completions under PREFIX/share
    /// (the paths written are printed).
    #[arg(long, conflicts_with = "target")]
    pub install: bool,
    /// With --install: where to write (default: the directory above the one that holds this
    /// fairlock, e.g. ~/.cargo for ~/.cargo/bin/fairlock, where man finds the pages).
    #[arg(long, value_name = "PREFIX", requires = "install")]
    pub prefix: Option<PathBuf>,
}

/// What `fairlock generate WHAT` prints.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Target {
    /// The manual page fairlock(1), in roff (man -l - reads it).
    Man,
    /// bash's completion script.
    Bash,
    /// zsh's completion function (_fairlock).
    Zsh,
    /// fish's completions.
    Fish,
}

/// Where `--install` puts each shell's completion script, under PREFIX: the places where
/// bash-completion, zsh (its site-functions, once on `fpath`) and fish look.
const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "share/bash-completion/completions/fairlock"),
    (Shell::Zsh, "share/zsh/site-functions/_fairlock"),
    (Shell::Fish, "share/fish/vendor_completions.d/fairlock.fish"),
];

/// The manual pages' directory under PREFIX.
const MAN_DIR: &str = "share/man/man1";

pub fn main(a: &GenerateArgs, cli: Command) -> Result<u8, Failure> {
    let cli = built(cli);
    let text = match a.target {
        // clap requires WHAT or --install, never both.
        None => return install(a.prefix.as_deref(), &cli),
        Some(Target::Man) => man_page(&cli, None),
        Some(Target::Bash) => completion(&cli, Shell::Bash),
        Some(Target::Zsh) => completion(&cli, Shell::Zsh),
        Some(Target::Fish) => completion(&cli, Shell::Fish),
    };
    stdout::write(&text);
    Ok(0)
}

/// The command line as the pages and completions show it: built (each subcommand knows its
/// page name, `fairlock-run`), without the hidden worker and `help` subcommands.
fn built(cli: Command) -> Command {
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    cli
}

/// The visible subcommands, in the order `fairlock --help` lists them.
fn subcommands(cli: &Command) -> impl Iterator<Item = &Command> {
    cli.get_subcommands().filter(|s| !s.is_hide_set())
}

/// `--install`: every page and completion under PREFIX; prints what it wrote.
fn install(prefix: Option<&Path>, cli: &Command) -> Result<u8, Failure> {
    let prefix = match prefix {
        Some(p) => p.to_path_buf(),
        None => default_prefix()?,
    };
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let man = prefix.join(MAN_DIR);
    files.push((man.join("fairlock.1"), man_page(cli, None)));
    for sub in subcommands(cli) {
        let name = page_name(cli, sub);
        files.push((man.join(format!("{name}.1")), man_page(cli, Some(sub))));
    }
    for (shell, path) in COMPLETIONS {
        files.push((prefix.join(path), completion(cli, shell)));
    }
    let mut written = String::new();
    for (path, text) in &files {
        write_file(path, text)?;
        written.push_str(&format!("{}\n", path.display()));
    }
    stdout::write(&written);
    Ok(0)
}

/// The directory above the one that holds this executable (`~/.cargo` for
/// `~/.cargo/bin/fairlock`): man-db looks for pages in `DIR/../share/man` of every `DIR` on
/// `PATH`, and bash-completion for completions in `DIR/../share/bash-completion`.
fn default_prefix() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe().map_err(|e| {
        Failure::new(
            exit::OS,
            format!("cannot find this executable's path ({e}); give --prefix"),
        )
    })?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                format!(
                    "{}: no directory above this executable's; give --prefix",
                    exe.display()
                ),
            )
        })
}

/// Writes `text` to `path`, making its directories; replaces an earlier version.
fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    let fail = |what: &str, p: &Path, e: std::io::Error| {
        Failure::new(exit::NO_INPUT, format!("{}: {what}: {e}", p.display()))
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| fail("cannot create the directory", dir, e))?;
    }
    fs::write(path, text).map_err(|e| fail("cannot write", path, e))
}

/// A shell's completion script.
fn completion(cli: &Command, shell: Shell) -> String {
    let mut cmd = cli.clone();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "fairlock", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `fairlock-run` for `run`.
fn page_name(cli: &Command, sub: &Command) -> String {
    sub.get_display_name()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{}-{}", cli.get_name(), sub.get_name()))
}

/// The manual page of the command (`sub` None) or of one subcommand: clap_mangen's title,
/// name, synopsis, description, options and subcommand list, then the help's closing text
/// (examples, notes, exit status) as sections of their own, then SEE ALSO.
fn man_page(cli: &Command, sub: Option<&Command>) -> String {
    let cmd = sub.unwrap_or(cli);
    let page = clap_mangen::Man::new(cmd.clone())
        .title(match sub {
            Some(s) => page_name(cli, s).to_uppercase(),
            None => cli.get_name().to_uppercase(),
        })
        .source(format!("fairlock {}", env!("CARGO_PKG_VERSION")))
        .manual("fairlock manual");
    let mut out = Vec::new();
    render_page(&page, cmd, sub.is_none(), &mut out).expect("writing to a Vec");
    let mut roff = Roff::new();
    if let Some(after) = cmd.get_after_long_help().or_else(|| cmd.get_after_help()) {
        closing_text(&mut roff, &after.to_string());
    }
    see_also(&mut roff, cli, sub);
    roff.to_writer(&mut out).expect("writing to a Vec");
    String::from_utf8_lossy(&out).into_owned()
}

/// clap_mangen's sections of the page: everything but the help's closing text, which
/// [`closing_text`] lays out.
fn render_page(
    page: &clap_mangen::Man,
    cmd: &Command,
    with_subcommands: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    page.render_title(out)?;
    page.render_name_section(out)?;
    page.render_synopsis_section(out)?;
    page.render_description_section(out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        page.render_options_section(out)?;
    }
    if with_subcommands {
        page.render_subcommands_section(out)?;
    }
    Ok(())
}

/// The help's closing text, block by block (blocks are separated by blank lines): a block
/// that starts "Examples:" or "Exit status:" becomes that section, any other goes under
/// NOTES. A block with indented lines (examples, tables, lists) keeps its lines as they are;
/// prose is filled.
fn closing_text(roff: &mut Roff, text: &str) {
    let mut current: Option<&str> = None;
    for block in text.split("\n\n") {
        let (heading, body) = if let Some(rest) = block.strip_prefix("Examples:") {
            ("EXAMPLES", rest)
        } else if let Some(rest) = block.strip_prefix("Exit status:") {
            ("EXIT STATUS", rest)
        } else {
            ("NOTES", block)
        };
        if current != Some(heading) {
            roff.control("SH", [heading]);
            current = Some(heading);
        } else {
            roff.control("PP", []);
        }
        // "Exit status:" alone on its line heads a table; followed by text, it is prose.
        let body = match body.strip_prefix('\n') {
            Some(table) => table,
            None => body.trim_start(),
        };
        if body.lines().any(|l| l.starts_with(' ')) {
            roff.control("nf", []);
            for line in body.lines() {
                roff.text([roman(line)]);
            }
            roff.control("fi", []);
        } else {
            roff.text([roman(body.split_whitespace().collect::<Vec<_>>().join(" "))]);
        }
    }
}

/// SEE ALSO: the other pages of the command, flock(1), and the documentation on the web.
fn see_also(roff: &mut Roff, cli: &Command, sub: Option<&Command>) {
    roff.control("SH", ["SEE ALSO"]);
    let mut refs: Vec<String> = Vec::new();
    if sub.is_some() {
        refs.push("fairlock(1)".to_owned());
    }
    for s in subcommands(cli) {
        if sub.is_none_or(|me| me.get_name() != s.get_name()) {
            refs.push(format!("{}(1)", page_name(cli, s)));
        }
    }
    refs.push("flock(1)".to_owned());
    let mut line = Vec::new();
    for (i, r) in refs.iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        line.push(bold(r.as_str()));
    }
    roff.text(line);
    roff.control("PP", []);
    roff.text([roman(
        "The library, the Python package and the design: https://github.com/fairlock-rs/fairlock",
    )]);
}
