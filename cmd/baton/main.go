package main

import (
	"context"
	"os"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
