package cc

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"ilnp/internal/nstest"
	"ilnp/internal/structops"
)

// testName is a per-test registration name, so parallel tests and lab runs never collide on
// the kernel-wide list.
func testName(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "_" + hex.EncodeToString(b)
}

// load registers algo for the test and unregisters it when the test ends, pass or fail.
func load(t *testing.T, algo string) *Loaded {
	t.Helper()
	nstest.RequireRoot(t)
	l, err := Load(algo, testName(t, algo[:3]))
	if err != nil {
		t.Fatalf("load %s: %v", algo, err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("unload %s: %v", l.Name, err)
		}
	})
	return l
}

func TestLoadRegistersAndCloseUnregisters(t *testing.T) {
	for _, algo := range []string{Hybla, Veno} {
		t.Run(algo, func(t *testing.T) {
			nstest.RequireRoot(t)
			l, err := Load(algo, testName(t, algo[:3]))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			closed := false
			defer func() {
				if !closed {
					_ = l.Close()
				}
			}()
			if reg, err := structops.Registered(l.Name); err != nil || !reg {
				t.Fatalf("%s not in %s after loading (%v)", l.Name, structops.AvailablePath, err)
			}
			if _, err := Load(algo, l.Name); err == nil {
				t.Fatalf("a second registration under %q succeeded", l.Name)
			}
			c, err := l.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if c != (Counters{}) {
				t.Fatalf("fresh counters not zero: %v", c.Map())
			}
			closed = true
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if reg, err := structops.Registered(l.Name); err != nil || reg {
				t.Fatalf("%s still registered after Close (%v)", l.Name, err)
			}
		})
	}
}
