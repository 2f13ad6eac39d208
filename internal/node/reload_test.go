package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"ilnp/internal/timeline"
)

// SIGHUP makes a running ilnpd read its configuration again: what can change at run time
// changes (handoff mode, LU attempts, the hosts file's names), a bad file or a change that
// needs a restart is refused with its reason and leaves the daemon as it was.
func TestReload(t *testing.T) {
	n := newTestNet(t, "soft")
	conf := filepath.Join(n.dir, "mn.conf")
	orig, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	hup := func(text string) {
		t.Helper()
		writeFile(t, conf, text)
		if err := n.mn.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	logHas := func(what, want string) {
		t.Helper()
		n.waitFor(5*time.Second, what, func() (bool, string) {
			b, _ := os.ReadFile(n.mn.log)
			return strings.Contains(string(b), want), tailFile(n.mn.log, 5)
		})
	}

	// A new name in the hosts file, and new values for two reloadable keys.
	hosts, err := os.ReadFile(n.hostsFn)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, n.hostsFn, string(hosts)+fmt.Sprintf("%s|10,%s newpeer\n", l1, cnNID))
	hup(strings.Replace(string(orig), "handoff soft", "handoff hard", 1) + "lu-max-attempts 3\n")
	logHas("reload applied", `msg="configuration reloaded" node=mn`)
	logHas("reload's changed keys", "changed=\"[handoff lu-max-attempts]\"")
	n.waitFor(5*time.Second, "handoff mode event", func() (bool, string) {
		evs, err := n.mn.events()
		return err == nil && hasEvent(evs, timeline.HandoffMode, "soft -> hard"), fmt.Sprint(err)
	})
	showConfig := func() map[string]string {
		t.Helper()
		var values map[string]string
		if err := n.mn.showJSON("config", &values); err != nil {
			t.Fatalf("ilnpctl show config: %v", err)
		}
		return values
	}
	if c := showConfig(); c["handoff"] != "hard" || c["lu-max-attempts"] != "3" {
		t.Fatalf("show config after the reload: %v", c)
	}
	want := ilv(l1, cnNID).String()
	n.waitFor(5*time.Second, "MN resolves the name added to the hosts file", func() (bool, string) {
		out, err := n.MN.Try("getent", "ahostsv6", "newpeer")
		return err == nil && strings.Contains(out, want), out
	})

	// A bad line: refused with FILE:LINE, the daemon keeps running.
	hup(string(orig) + "lu-max-attempts many\n")
	logHas("bad file refused", fmt.Sprintf("%s:%d: lu-max-attempts", conf, strings.Count(string(orig), "\n")+1))
	// A key that needs a restart: refused as a whole (the handoff change with it too).
	hup(strings.Replace(strings.Replace(string(orig), "interfaces mn1 mn2", "interfaces mn1", 1), "handoff soft", "handoff hard", 1))
	logHas("restart-only change refused", "interfaces changed, which needs a restart; nothing applied")
	if c := showConfig(); c["handoff"] != "hard" || c["interfaces"] != "mn1 mn2" || c["lu-max-attempts"] != "3" {
		t.Fatalf("show config after the refused reloads: %v, want the first reload's values", c)
	}
	if err, done := n.mn.proc.wait(0); done {
		t.Fatalf("daemon exited after SIGHUP: %v", err)
	}
}
