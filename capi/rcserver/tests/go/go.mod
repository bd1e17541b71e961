module rctb.test/rcserver

go 1.19
