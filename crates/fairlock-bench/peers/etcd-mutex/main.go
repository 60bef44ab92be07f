// etcd-mutex: etcd's own lock, clientv3/concurrency.Mutex (etcd 3.4), driven the way
// fairlock-bench's etcdbench drives fairlock-etcd, so that their figures line up.
//
// Every client is a process of its own with its own connection and its own session
// (lease, TTL 10 s like fairlock-etcd's default). Each loops for the measured window:
// lock, a tiny critical section (the bookkeeping below), unlock. Hand-off latency is the
// time from a holder's Unlock call to the next holder's return from Lock, taken from a
// CLOCK_MONOTONIC stamp in a shared page (a 4 KiB file mapped MAP_SHARED, the same layout
// as etcdbench's: see crates/fairlock-bench/examples/etcdbench/stats.rs).
//
//	etcd-mutex -endpoints 127.0.0.1:2379,... [-clients 1,4,16] [-d 5s] [-name bench]
//	    standalone: runs each client count in turn and prints one table row per count
//	etcd-mutex worker -endpoints ... -name NAME -client K -shm FILE -out FILE
//	    one client (etcdbench starts these): prints "ready", waits for a line on stdin,
//	    loops inside the window written in the shared page, writes its samples to FILE
//
// Built offline in GOPATH mode from Debian's packages: see build.sh.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"io/ioutil"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	"golang.org/x/sys/unix"
)

// The words of the shared page (as in etcdbench's stats.rs).
const (
	wLastRelease = 0
	wLastToken   = 1
	wInside      = 2
	wOverlaps    = 3
	wOutOfOrder  = 4
	wStart       = 6
	wEnd         = 7
)

func nowNs() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

type page []byte

func mapPage(path string) page {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fail("open the shared page: %v", err)
	}
	defer f.Close()
	b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fail("map the shared page: %v", err)
	}
	return page(b)
}

func (p page) w(i int) *uint64 { return (*uint64)(unsafe.Pointer(&p[i*8])) }

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "etcd-mutex: "+format+"\n", a...)
	os.Exit(1)
}

// myRev is the create revision of the mutex's key: its place in line, the fencing token.
// concurrency.Mutex keeps it unexported; reading it by reflection costs no request.
func myRev(m *concurrency.Mutex) uint64 {
	return uint64(reflect.ValueOf(m).Elem().FieldByName("myRev").Int())
}

func worker(args []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	endpoints := fs.String("endpoints", "", "comma-separated HOST:PORT")
	name := fs.String("name", "bench", "lock name (key prefix)")
	client := fs.Int("client", 0, "this client's number")
	shm := fs.String("shm", "", "the shared page")
	out := fs.String("out", "", "where to write the samples")
	ttl := fs.Int("ttl", 10, "session TTL in seconds")
	fs.Parse(args)

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		fail("connect: %v", err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(*ttl))
	if err != nil {
		fail("session: %v", err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "etcdbench/"+*name)
	p := mapPage(*shm)
	ctx := context.Background()

	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail("waiting for the start: %v", err)
	}
	end := atomic.LoadUint64(p.w(wEnd))
	var lines []string
	for {
		t0 := nowNs()
		if t0 >= end {
			break
		}
		if err := m.Lock(ctx); err != nil {
			fail("lock: %v", err)
		}
		t1 := nowNs()
		// The critical section: check and stamp the shared page.
		if atomic.SwapUint64(p.w(wInside), 1) == 1 {
			atomic.AddUint64(p.w(wOverlaps), 1)
		}
		tok := myRev(m)
		if last := atomic.LoadUint64(p.w(wLastToken)); last != 0 && tok <= last {
			atomic.AddUint64(p.w(wOutOfOrder), 1)
		}
		atomic.StoreUint64(p.w(wLastToken), tok)
		handoff := "-"
		if lr := atomic.LoadUint64(p.w(wLastRelease)); lr != 0 && lr <= t1 {
			handoff = strconv.FormatUint(t1-lr, 10)
		}
		lines = append(lines, fmt.Sprintf("S %d %d %s", t1, t1-t0, handoff))
		atomic.StoreUint64(p.w(wInside), 0)
		atomic.StoreUint64(p.w(wLastRelease), nowNs())
		if err := m.Unlock(ctx); err != nil {
			fail("unlock: %v", err)
		}
	}
	text := fmt.Sprintf("client %d\n%s\n", *client, strings.Join(lines, "\n"))
	if err := ioutil.WriteFile(*out, []byte(text), 0o644); err != nil {
		fail("write %s: %v", *out, err)
	}
}

// rank: the 1-based nearest rank of the q-quantile of n values, as etcdbench's histogram.
func rank(n int, q float64) int {
	r := int(math.Ceil(float64(n) * q))
	if r < 1 {
		r = 1
	}
	if r > n {
		r = n
	}
	return r
}

func quantile(sorted []uint64, q float64) string {
	if len(sorted) == 0 {
		return "–"
	}
	return fmtNs(sorted[rank(len(sorted), q)-1])
}

func fmtNs(v uint64) string {
	x := float64(v)
	switch {
	case x < 1e3:
		return fmt.Sprintf("%.0f ns", x)
	case x < 1e6:
		return fmt.Sprintf("%.1f µs", x/1e3)
	case x < 1e9:
		return fmt.Sprintf("%.2f ms", x/1e6)
	}
	return fmt.Sprintf("%.2f s", x/1e9)
}

func fmtRate(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2f M/s", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1f k/s", x/1e3)
	}
	return fmt.Sprintf("%.0f /s", x)
}

func sorted(v []uint64) []uint64 {
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v
}

// runOne starts n worker processes of this program, measures for d, prints one row.
func runOne(endpoints, name string, n int, d time.Duration) {
	dir, err := ioutil.TempDir("", "etcd-mutex-")
	if err != nil {
		fail("temp dir: %v", err)
	}
	defer os.RemoveAll(dir)
	shm := filepath.Join(dir, "shm")
	if err := ioutil.WriteFile(shm, make([]byte, 4096), 0o644); err != nil {
		fail("shared page: %v", err)
	}
	p := mapPage(shm)
	self, _ := os.Executable()
	var cmds []*exec.Cmd
	var stdins []io.WriteCloser
	var readers []*bufio.Reader
	for k := 0; k < n; k++ {
		c := exec.Command(self, "worker", "-endpoints", endpoints, "-name", name,
			"-client", strconv.Itoa(k), "-shm", shm, "-out", filepath.Join(dir, fmt.Sprintf("out%d", k)))
		c.Stderr = os.Stderr
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		in, _ := c.StdinPipe()
		out, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			fail("start a worker: %v", err)
		}
		cmds = append(cmds, c)
		stdins = append(stdins, in)
		readers = append(readers, bufio.NewReader(out))
	}
	for _, r := range readers {
		if l, err := r.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
			fail("a worker did not get ready: %q %v", l, err)
		}
	}
	start := nowNs()
	end := start + uint64(d.Nanoseconds())
	atomic.StoreUint64(p.w(wStart), start)
	atomic.StoreUint64(p.w(wEnd), end)
	for _, in := range stdins {
		fmt.Fprintln(in, "go")
		in.Close()
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			fail("a worker failed: %v", err)
		}
	}
	var waits, handoffs []uint64
	var shares []int
	var worst uint64 // the largest per-client wait p99
	worstSet := false
	for k := 0; k < n; k++ {
		b, err := ioutil.ReadFile(filepath.Join(dir, fmt.Sprintf("out%d", k)))
		if err != nil {
			fail("read a worker's samples: %v", err)
		}
		mine := 0
		var own []uint64
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) != 4 || f[0] != "S" {
				continue
			}
			g, _ := strconv.ParseUint(f[1], 10, 64)
			if g < start || g >= end {
				continue
			}
			mine++
			w, _ := strconv.ParseUint(f[2], 10, 64)
			waits = append(waits, w)
			own = append(own, w)
			if h, err := strconv.ParseUint(f[3], 10, 64); err == nil {
				handoffs = append(handoffs, h)
			}
		}
		shares = append(shares, mine)
		if len(own) > 0 {
			own = sorted(own)
			if p := own[rank(len(own), 0.99)-1]; !worstSet || p > worst {
				worst, worstSet = p, true
			}
		}
	}
	worstS := "–"
	if worstSet {
		worstS = fmtNs(worst)
	}
	waits, handoffs = sorted(waits), sorted(handoffs)
	total := len(waits)
	minS, maxS := total, 0
	for _, s := range shares {
		if s < minS {
			minS = s
		}
		if s > maxS {
			maxS = s
		}
	}
	share := func(s int) string {
		if total == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(s)/float64(total))
	}
	// The columns of etcdbench's detail table.
	fmt.Printf("| etcd Mutex (Go) | %d | %d | %s | %s / %s / %s | %s / %s / %s | %s / %s | %s | %d | %d |\n",
		n, total, fmtRate(float64(total)/d.Seconds()),
		quantile(handoffs, 0.5), quantile(handoffs, 0.99), quantile(handoffs, 1),
		quantile(waits, 0.5), quantile(waits, 0.99), quantile(waits, 1),
		share(minS), share(maxS), worstS,
		atomic.LoadUint64(p.w(wOutOfOrder)), atomic.LoadUint64(p.w(wOverlaps)))
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		worker(os.Args[2:])
		return
	}
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated HOST:PORT")
	clients := flag.String("clients", "1,4,16", "client counts, comma-separated")
	d := flag.Duration("d", 5*time.Second, "measured time per client count")
	name := flag.String("name", "bench", "lock name prefix")
	flag.Parse()
	fmt.Println("| lock | clients | acquisitions | acq/s | hand-off p50 / p99 / max | wait p50 / p99 / max | client share min / max | worst client's wait p99 | out of token order | overlaps |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			fail("bad client count %q", c)
		}
		runOne(*endpoints, fmt.Sprintf("%s-%d-%d", *name, n, time.Now().UnixNano()), n, *d)
	}
}
