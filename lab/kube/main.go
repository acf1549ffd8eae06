// Command kube is the real upstream Kubernetes control plane in one multi-call executable (like
// hyperkube and k3s): the same code as the upstream etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kubectl commands, plus kwok, which simulates nodes and the pods on them (no
// container runs). One executable pays the Go link once instead of six times. On top of them,
// two commands of ours: control-plane (controlplane.go) starts them all with generated
// certificates, and k3s (k3s_standin.go) is the k3s stand-in of the machine lab.
//
// The command is chosen by the name it is run as (a symlink named kube-apiserver) or by its first
// argument (kube kube-apiserver --etcd-servers=…); the rest of the arguments go to that command
// unchanged.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as in the upstream commands

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwok "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

var commands = map[string]func() int{
	"etcd":                    func() int { etcdmain.Main(os.Args); return 0 },
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand()) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl":                 runKubectl,
	"kwok":                    runKwok,
	"control-plane":           runControlPlane,
	"k3s":                     runK3s, // the k3s stand-in (k3s_standin.go)
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = os.Args[1:] // cobra reads os.Args[1:]: the chosen command's own arguments
	}
	run, ok := commands[name]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: kube <%s> [arguments…] (or run it through a symlink of that name)\n", strings.Join(names, "|"))
		os.Exit(2)
	}
	os.Exit(run())
}

// runKubectl is upstream cmd/kubectl/kubectl.go.
func runKubectl() int {
	command := kubectl.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err) // prints the error the way kubectl does and exits 1
	}
	return 0
}

// runKwok is upstream sigs.k8s.io/kwok/cmd/kwok/main.go.
func runKwok() int {
	// Cobra merges the global flag set into kwok's command, and the Kubernetes packages linked
	// into this executable put their own --version there (component-base's verflag), which
	// clashes with cobra's: kwok gets a global flag set of its own, as in its own executable.
	pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsWhitelist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := kwoklog.InitFlags(ctx, flagset)
	ctx, err := kwokconfig.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("Init config flags", err)
		return 1
	}
	var command *cobra.Command = kwok.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", err)
		return 1
	}
	return 0
}
