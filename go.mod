module github.com/baton-go/baton

go 1.26.0

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
)
