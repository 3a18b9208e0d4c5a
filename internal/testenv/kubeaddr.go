package testenv

// KubeAdvertiseAddress is the address that the tests' kube-apiserver
// should publish as its own (its --advertise-address flag, set through
// envtest's APIServer.Configure): 192.0.2.1, of TEST-NET-1 (RFC 5737),
// which no test dials. Without the flag kube-apiserver takes the address
// of the default route's interface, and refuses to start on a machine
// that has no default route (a container or CI sandbox with only a
// loopback interface): every Kubernetes test would fail there. It
// refuses a loopback address for the flag too.
const KubeAdvertiseAddress = "192.0.2.1"
