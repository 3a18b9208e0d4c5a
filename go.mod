module github.com/baton-go/baton

go 1.26.0

require k8s.io/utils v0.0.0-20261023123148-ca04ba58ecab
