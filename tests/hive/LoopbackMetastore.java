// Hive 2.3's thrift metastore served on loopback only. HiveMetaStore.main binds every interface and has no
// setting for the address (Hive 3 added one), so this serves the same handler, processor, transport and
// protocol it would, on 127.0.0.1:PORT. Run with Java's single-file source launcher:
// `java -cp <conf>:<pyspark jars> LoopbackMetastore.java PORT`; hive-site.xml comes from the class path.
import java.net.InetSocketAddress;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

public class LoopbackMetastore {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        HiveConf conf = new HiveConf(HiveMetaStore.class);
        ThriftHiveMetastore.Iface handler = HiveMetaStore.newRetryingHMSHandler("loopback metastore", conf, false);
        TServerSocket socket = new TServerSocket(new InetSocketAddress("127.0.0.1", port));
        TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket)
            .processor(new TSetIpAddressProcessor<>(handler))
            .transportFactory(new TTransportFactory())
            .protocolFactory(new TBinaryProtocol.Factory())
            .inputProtocolFactory(new TBinaryProtocol.Factory(true, true, 104857600L, -1L))
            .minWorkerThreads(4)
            .maxWorkerThreads(64);
        System.out.println("metastore listening on 127.0.0.1:" + port);
        new TThreadPoolServer(serverArgs).serve();
    }
}
