/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
import java.io.FileOutputStream;
import java.io.OutputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/**
 * The tests' YARN: one ResourceManager and `nodes` NodeManagers of Hadoop's MiniYARNCluster, every server bound to
 * loopback on ports of the system's choosing. Writes the configuration a client needs (the RM's addresses) to
 * `<conf dir>/yarn-site.xml`, prints READY with the RM's address, and runs until its standard input closes.
 *
 * <p>java LoopbackYarn.java CONF_DIR NODES MEMORY_MB VCORES (run in the directory it may keep its work in)
 */
public class LoopbackYarn {
  public static void main(String[] args) throws Exception {
    String confDir = args[0];
    int nodes = Integer.parseInt(args[1]);
    Configuration conf = new YarnConfiguration();
    conf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, false);
    conf.set(YarnConfiguration.RM_BIND_HOST, "127.0.0.1");
    conf.set(YarnConfiguration.NM_BIND_HOST, "127.0.0.1");
    conf.set(YarnConfiguration.RM_HOSTNAME, "127.0.0.1");
    conf.set(YarnConfiguration.NM_ADDRESS, "127.0.0.1:0");
    conf.set(YarnConfiguration.NM_WEBAPP_ADDRESS, "127.0.0.1:0");
    conf.set(YarnConfiguration.NM_LOCALIZER_ADDRESS, "127.0.0.1:0");
    conf.set("yarn.nodemanager.collector-service.address", "127.0.0.1:0");
    conf.set(YarnConfiguration.NM_AUX_SERVICES, ""); // no MapReduce shuffle: it listens on every interface
    conf.setBoolean(YarnConfiguration.TIMELINE_SERVICE_ENABLED, false);
    // the NodeManagers share one machine's memory with the tests: the containers' sizes are what they ask for
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    conf.set(YarnConfiguration.NM_PMEM_MB, args[2]);
    conf.set(YarnConfiguration.NM_VCORES, args[3]);
    conf.set(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, "128");
    conf.set(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, args[2]);
    // a nearly full disk would mark the only node unhealthy and nothing would run
    conf.set(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, "100.0");
    conf.set(YarnConfiguration.NM_MIN_PER_DISK_FREE_SPACE_MB, "0");
    MiniYARNCluster cluster = new MiniYARNCluster("lakewarden", nodes, 1, 1);
    cluster.init(conf);
    cluster.start();
    if (!cluster.waitForNodeManagersToConnect(60_000)) {
      throw new IllegalStateException("the NodeManagers did not register within a minute");
    }
    Configuration running = cluster.getConfig();
    try (OutputStream out = new FileOutputStream(confDir + "/yarn-site.xml")) {
      running.writeXml(out);
    }
    System.out.println("READY " + running.get(YarnConfiguration.RM_ADDRESS));
    System.out.flush();
    while (System.in.read() != -1) {
      // runs until the test closes its end
    }
    cluster.stop();
  }
}
