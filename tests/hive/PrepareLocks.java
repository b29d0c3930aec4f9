// Creates the Hive Metastore's transaction and lock tables (TXNS, HIVE_LOCKS, ...) in the metastore's
// database before the metastore starts: DataNucleus creates only the catalog's own tables, and Iceberg's
// HiveCatalog locks a table through the metastore on every commit. Run with `java -cp <conf>:<jars> THIS_FILE`
// (Java's single-file source launcher); HiveConf reads hive-site.xml from the class path.
public class PrepareLocks {
    public static void main(String[] args) throws Exception {
        org.apache.hadoop.hive.metastore.txn.TxnDbUtil.prepDb(new org.apache.hadoop.hive.conf.HiveConf());
    }
}
