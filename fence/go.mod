module github.com/baton-go/baton/fence

go 1.26.0

replace (
	github.com/baton-go/baton => ..
	github.com/baton-go/baton/internal/testenv => ../internal/testenv
)

require github.com/baton-go/baton v0.0.0-00010101000000-000000000000

require (
	github.com/baton-go/baton/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/jackc/pgx/v5 v5.12.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
