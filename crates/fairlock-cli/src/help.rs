//! The help texts: what `fairlock --help` and each subcommand's `--help` print after the
//! options (examples, the environment, exit status), and `fairlock run`'s usage lines.

/// What `fairlock --help` and the manual page fairlock(1) say first.
pub const ABOUT: &str = "\
Run commands one at a time, in arrival order, under a lock shared by processes.

fairlock run takes a lock as flock(1) does, but strictly fair: every fairlock run on the
same LOCKFILE waits its turn in arrival order (first come, first served), and a holder or
waiter that dies never blocks the others: the next holder takes over and is told
(FAIRLOCK_OWNER_DIED=1). A lock may carry a lease (--lease) after which the next waiter
takes it over, and every grant a fencing token (FAIRLOCK_TOKEN). The lock's state lives in
LOCKFILE, which every user needs write access to; waiters sleep until their turn. A
LOCKFILE holds an exclusive lock, a reader/writer lock (-s, -x), a semaphore (--permits N)
or any number of named locks (--name KEY); etcd://HOST:PORT/NAME is the same lock across
hosts (a build with the etcd feature). fairlock lock and unlock take the lock for a shell's
descriptor, fairlock status shows who holds and who waits, fairlock demo compares with
flock(2).";

/// After the subcommands in `fairlock --help` (the exit-code table follows).
pub const MAIN: &str = "\
Examples:
  fairlock run /run/lock/backup.lock -- rsync -a /data /backup
  fairlock run -w 10 jobs.lock -c 'make deploy >> deploy.log'
  fairlock status jobs.lock
  fairlock demo --quick

Every `fairlock run` on the same LOCKFILE waits its turn in arrival order (first come,
first served); a waiter or holder that dies never blocks the others.
Manual: man fairlock, man fairlock-run, ... (installed next to this binary by
`fairlock generate --install`); https://github.com/fairlock-rs/fairlock.";

/// `fairlock run`'s usage lines (with COMMAND, or with -c).
pub const RUN_USAGE: &str = "\
fairlock run [OPTIONS] LOCKFILE [--] COMMAND [ARGS]...
       fairlock run [OPTIONS] LOCKFILE -c SHELL_COMMAND";

/// After the options in `fairlock run --help`.
pub const RUN: &str = "\
Examples:
  fairlock run /tmp/job.lock -- make -j4           # wait in line, then run make
  fairlock run -n /tmp/job.lock ./nightly.sh       # skip if running or anyone waits
  fairlock run -w 2.5 -E 75 /tmp/job.lock -c 'cat a >> b'
  fairlock run --lease 60 --kill-on-lost /tmp/job.lock ./step.sh
  fairlock run etcd://10.0.0.1:2379,10.0.0.2:2379/deploy -- ./deploy.sh   # across hosts
  ETCDCTL_CACERT=ca.pem ETCDCTL_USER=deploy:pw fairlock run etcds://10.0.0.1:2379/deploy -- ./deploy.sh

The command sees FAIRLOCK_TOKEN (the grant's fencing token, strictly increasing),
FAIRLOCK_FILE (absolute path of the lock file) and FAIRLOCK_OWNER_DIED (1 if the
previous holder died or was taken over, else 0). With etcd://, FAIRLOCK_FILE is the
address, the lease (--lease, whole seconds, default 10) is renewed while fairlock lives,
and a holder that dies is taken over once its lease expires. etcds:// reaches the cluster
through TLS, with etcdctl's environment: ETCDCTL_CACERT (required), ETCDCTL_CERT and
ETCDCTL_KEY (a client certificate), and, for either scheme, ETCDCTL_USER=user:password
(or ETCDCTL_PASSWORD). SIGINT, SIGTERM and SIGHUP sent to
fairlock alone are forwarded to the command (once: not when the command got them too,
as from Ctrl-C or kill -PGID); signals fairlock inherited ignored (nohup) stay ignored.
A conflict (-n) or timeout (-w) prints nothing unless -v is given.

Exit status: the command's (128+SIG if killed by a signal); 1 (or -E N) busy/timeout;
64 usage; 65 not a lock file; 66 cannot open; 68 etcd: cannot reach a quorum; 69 lock lost (--lease expired and was
taken over while the command ran); 77 etcd: certificate or password refused; 126 cannot
execute; 127 command not found.";

/// After the options in `fairlock lock --help`.
pub const LOCK: &str = "\
Examples:
  exec 9>>/tmp/jobs.lock          # the shell opens the lock file on fd 9 (for writing)
  fairlock lock 9                 # waits its turn; the shell now holds the lock
  ./critical-section.sh
  fairlock unlock 9               # or close fd 9 (exec 9>&-), or let the shell exit

The lock belongs to the shell's open file description, not to the fairlock process: it is
held until `fairlock unlock 9`, until every process sharing that description (the shell and
any child still holding fd 9) has closed it, or until the shell dies; then the next waiter
takes over and is told the owner died. A holder's waiters find out about its death by polling
(within a millisecond for the next in line). Interrupted while waiting (Ctrl-C, SIGTERM),
fairlock lock gives its place up and exits 130/143.";

/// After the options in `fairlock unlock --help`.
pub const UNLOCK: &str = "\
Releases the lock that fd FD holds (taken with fairlock lock FD); the next waiter gets it.
Exits 0 also if FD holds no lock (as flock -u), 69 if the lock was lost (its --lease ran out
and the next waiter took over).";

/// After the options in `fairlock status --help`.
pub const STATUS: &str = "\
Examples:
  fairlock status /tmp/job.lock
  fairlock status --json /tmp/job.lock | jq .owner_pid
  fairlock status etcd://10.0.0.1:2379/deploy
  ETCDCTL_CACERT=ca.pem fairlock status etcds://10.0.0.1:2379/deploy

The file is only read (never locked, created or modified). JSON fields: path, held,
owner_pid, owner_tid, token, next_ticket, waiters (count), arriving, lease_remaining_ms,
holder {ticket, token, state, pid, tid, alive, held_ms, lease_remaining_ms, owner_died,
shared} or null, kind (exclusive, rwlock or semaphore), permits (a semaphore's, else null),
bypass_bound (an exclusive lock created with a bounded bypass: the most times a waiter may be
overtaken; null for strict FIFO), holders [every holder, as holder: readers and permit
holders hold together], queue [{ticket, token, state, pid, tid, alive, waited_ms, shared}];
unknown values are null.
A file of named locks prints {path, kind: names, names: [...]}, one such object per name,
each starting with name (--name KEY: only that one).
alive: false means the process is dead; the next acquire passes it over. shared: a reader
or a permit (false for writers and exclusive locks).
An etcd:// lock prints the same lines and fields: address instead of path, name first; no
tickets (the waiters' lines start with their token) and null for what etcd does not record
(tid, alive, held_ms, lease_remaining_ms, next_ticket); each holder and queue entry adds
host, lease (its id) and owner (the record it wrote); last_token and revision close it.

Exit status: 0; 65 not a lock file (or corrupt/incompatible); 66 cannot open (missing,
unreadable, not a regular file); 68 etcd://: no quorum; 77 etcd: certificate or password
refused; 64 usage.";

/// After the options in `fairlock demo --help`.
pub const DEMO: &str = "\
Needs no setup: the lock files live in a fresh directory under $XDG_RUNTIME_DIR (else
/dev/shm, else the temp dir) that is removed at the end. It runs worker processes that
  1. wait for the lock while another worker re-locks it at once after every turn (as cron
     jobs and worker loops do): how long does each waiter wait, behind how many re-locks?
  2. lock, work, unlock and repeat for a fixed time: how many times does a later
     request overtake an earlier one, how are grants shared, how are the waits spread?
  3. (fairlock) a holder is SIGKILLed while two others wait: how soon does the next one
     get the lock, and does it know its predecessor died?
Steps 1 and 2 run once with fairlock and once with flock(2) on another file.
Progress goes to stderr (one updating line on a terminal); results to stdout;
--plot FILE also draws steps 1 and 2 as an SVG picture.";

/// After the options in `fairlock generate --help`.
pub const GENERATE: &str = "\
Examples:
  fairlock generate --install          # after cargo install: man fairlock works
  fairlock generate man | man -l -     # read the page without installing it
  fairlock generate bash > ~/.local/share/bash-completion/completions/fairlock

--install writes PREFIX/share/man/man1/fairlock.1 and one page per subcommand
(fairlock-run.1, ...), PREFIX/share/bash-completion/completions/fairlock,
PREFIX/share/zsh/site-functions/_fairlock and
PREFIX/share/fish/vendor_completions.d/fairlock.fish, replacing earlier versions. man
finds the pages by itself when PREFIX/bin is on PATH (as ~/.cargo/bin is), bash the
completions too; zsh needs PREFIX/share/zsh/site-functions on its fpath, fish
PREFIX/share on XDG_DATA_DIRS unless PREFIX is /usr or /usr/local.

Exit status: 0; 64 usage; 66 a file or directory cannot be written; 71 this
executable's path is unknown (give --prefix).";
