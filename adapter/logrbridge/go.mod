module github.com/baton-go/baton/adapter/logrbridge

go 1.26.0

replace github.com/baton-go/baton => ../..

require github.com/baton-go/baton v0.0.0-00010101000000-000000000000

require (
	github.com/go-logr/logr v1.4.4
	go.uber.org/goleak v1.3.0
)

require github.com/stretchr/testify v1.12.1 // indirect
