module kubescribe.io/cluster/pause

go 1.26.0
