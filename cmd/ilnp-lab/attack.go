package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"ilnp/lab/attack"
)

// cmdAttack is `ilnp-lab attack`: forged packets against the lab's ILNP hosts during a live flow.
func cmdAttack(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("attack", flag.ExitOnError)
	var c common
	c.registerOutBin(fs)
	count := fs.Int("count", 10000, "forged packets over all attacks")
	rate := fs.Int("rate", 1000, "packets per second each attack sends (the session flood twice that)")
	pingFlood := fs.Duration("ping-flood", attack.DefaultPingFlood, "how long ping-flood-fill floods (at --rate, on top of --count)")
	_ = fs.Parse(args)
	bin, err := c.ilnpBinaries("attack")
	if err != nil {
		return err
	}
	res, err := attack.Run(ctx, attack.Config{Out: c.out, BinDir: bin, Count: *count, Rate: *rate,
		PingFlood: *pingFlood, Log: os.Stderr})
	if err != nil {
		return err
	}
	sent, accepted := 0, 0
	for _, r := range res {
		if r.UnverifiedBytesSent == nil {
			sent += *r.Sent
			accepted += *r.Accepted
		}
	}
	fmt.Printf("%d forged packets without a valid nonce sent, %d accepted (the insider redirection is reported apart, in report.md); %s, %s\n",
		sent, accepted, filepath.Join(c.out, "attack.json"), filepath.Join(c.out, "report.md"))
	return nil
}
