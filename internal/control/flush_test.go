package control

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/internal/wire"
)

// flushing is a daemon whose stop ends the control server at once, as ilnpd's does.
type flushing struct {
	*fake
	stop context.CancelFunc
}

func (f flushing) Flush(context.Context) (func(), error) { return f.stop, nil }

// The client must hear the daemon accept the flush even though accepting ends the daemon: the
// stop runs only after the reply is written (it used to race the reply and lose: "EOF").
func TestFlushAnsweredBeforeTheDaemonStops(t *testing.T) {
	for i := range 20 {
		sock := filepath.Join(t.TempDir(), "ctl.sock")
		ln, err := Listen(sock)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		h := flushing{fake: &fake{peers: map[string][]wire.RankedILV{}, tl: timeline.NewWriter(nil)}, stop: cancel}
		done := make(chan error, 1)
		go func() { done <- Serve(ctx, ln, h) }()
		if err := (Client{Socket: sock}).Flush(context.Background(), 5*time.Second); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the daemon did not stop after the flush")
		}
		cancel()
	}
}
