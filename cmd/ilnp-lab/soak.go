package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"ilnp/lab"
)

// cmdSoak is `ilnp-lab soak`: moves under live flows; DIR/soak.json (lab/soak.go).
func cmdSoak(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	var c common
	c.registerOutBin(fs)
	moves := fs.Int("moves", 50, "moves L2 <-> L3 (each: enter the other network, leave the old)")
	every := fs.Int("switch-every", 10, "alternate soft and hard handoff every this many moves")
	_ = fs.Parse(args)
	bin, err := c.ilnpBinaries("soak")
	if err != nil {
		return err
	}
	rep, err := lab.Soak(ctx, lab.SoakConfig{Out: c.out, BinDir: bin, Moves: *moves, SwitchEvery: *every, Progress: os.Stderr})
	if err != nil {
		return err
	}
	r := rep.Result
	fmt.Printf("moves %d (soft %d, hard %d), acked %d, sessions broken %d, UDP lost %d of %d (soft %d, hard %d), longest UDP gap %.0f ms, %.0f s\n",
		r.Moves, rep.SoftMoves, rep.HardMoves, r.Acked, r.SessionsBroken, r.UDPLost, rep.UDPSent, rep.UDPLostSoft, rep.UDPLostHard,
		rep.MaxUDPGapMs, rep.DurationSecs)
	fmt.Printf("start (after %d warm-up moves): %s\nend: %s\n", rep.WarmupMoves, rep.Start, rep.End)
	return nil
}
