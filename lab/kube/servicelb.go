package main

// The stand-in's service load balancer, in place of k3s's ServiceLB (klipper-lb). k3s's publishes
// each port of a Service of type LoadBalancer on every node (a DaemonSet of svclb pods with host
// ports) and writes the nodes' addresses in the Service's status.loadBalancer.ingress. The
// stand-in writes the addresses of every Ready node with a real kubelet — its InternalIP and the
// other addresses its machine is reached at (an annotation each node writes: a node joined by its
// WireGuard overlay address is still reached at its public one) — and leaves the publishing to
// kube-proxy, which routes a LoadBalancer Service's ingress addresses on every node (a request to
// <node address>:<port> reaches one of its endpoints).
// With kwok's simulated nodes there is no kube-proxy: the addresses are written, nothing answers.

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func runServiceLB(ctx context.Context, admin kubernetes.Interface, logf func(format string, args ...any)) {
	lastErr := ""
	for {
		err := syncServiceLB(ctx, admin, logf)
		message := ""
		if err != nil && ctx.Err() == nil {
			message = err.Error()
		}
		if message != lastErr && message != "" {
			logf("service load balancer: %s", message)
		}
		lastErr = message
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
	}
}

func syncServiceLB(ctx context.Context, admin kubernetes.Interface, logf func(format string, args ...any)) error {
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var addresses []string
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if node.Annotations[vtepMACAnnotation] == "" {
			continue // not a real node of the stand-in
		}
		ready := false
		for _, condition := range node.Status.Conditions {
			ready = ready || (condition.Type == corev1.NodeReady && condition.Status == corev1.ConditionTrue)
		}
		if !ready {
			continue
		}
		if ip := nodeInternalIP(node); ip != "" {
			addresses = append(addresses, ip)
		}
		for _, ip := range strings.Split(node.Annotations[addressesAnnotation], ",") {
			if ip != "" && !slices.Contains(addresses, ip) {
				addresses = append(addresses, ip)
			}
		}
	}
	sort.Strings(addresses)
	ingress := []corev1.LoadBalancerIngress{}
	for _, ip := range addresses {
		ingress = append(ingress, corev1.LoadBalancerIngress{IP: ip, IPMode: ptrTo(corev1.LoadBalancerIPModeVIP)})
	}
	services, err := admin.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range services.Items {
		service := &services.Items[i]
		if service.Spec.Type != corev1.ServiceTypeLoadBalancer || service.Spec.LoadBalancerClass != nil {
			continue
		}
		if reflect.DeepEqual(service.Status.LoadBalancer.Ingress, ingress) || (len(ingress) == 0 && len(service.Status.LoadBalancer.Ingress) == 0) {
			continue
		}
		service.Status.LoadBalancer.Ingress = ingress
		if _, err := admin.CoreV1().Services(service.Namespace).UpdateStatus(ctx, service, metav1.UpdateOptions{FieldManager: "k3s-standin-servicelb"}); err != nil {
			return err
		}
		logf("service load balancer: %s/%s on %v", service.Namespace, service.Name, addresses)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
