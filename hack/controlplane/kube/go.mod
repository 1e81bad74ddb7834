module kubescribe.io/controlplane/kube

go 1.26.0
