/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.io.UncheckedIOException;
import java.lang.ref.Cleaner;
import java.net.URI;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.fs.s3a.S3AFileStatus;
import org.apache.iceberg.aws.s3.S3FileIO;
import org.apache.iceberg.exceptions.RuntimeIOException;
import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.hadoop.HadoopInputFile;
import org.apache.iceberg.hadoop.HadoopOutputFile;
import org.apache.iceberg.io.BulkDeletionFailureException;
import org.apache.iceberg.io.FileInfo;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.StorageCredential;
import org.apache.iceberg.io.SupportsStorageCredentials;
import org.apache.iceberg.relocated.com.google.common.collect.Streams;
import org.apache.iceberg.util.PropertyUtil;
import org.apache.iceberg.util.Tasks;
import org.apache.iceberg.util.ThreadPools;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.model.Delete;
import software.amazon.awssdk.services.s3.model.DeleteObjectsRequest;
import software.amazon.awssdk.services.s3.model.DeleteObjectsResponse;
import software.amazon.awssdk.services.s3.model.ObjectIdentifier;
import software.amazon.awssdk.services.s3.model.S3Error;

/**
 * The FileIO of lakewarden's sessions: Iceberg's S3FileIO for S3, java.io for local files, HadoopFileIO for the
 * rest (HDFS), with what S3FileIO lacks added around it.
 *
 * <p>S3 goes through Iceberg's S3FileIO (the AWS SDK v2), with the settings a catalog gives its tables: the storage
 * profile in a table's `config` (s3.endpoint, client.region, s3.path-style-access), static keys, and the
 * credentials a REST catalog vends for a table's prefixes (`storage-credentials`), which S3FileIO renews through
 * the catalog's refresh endpoint. Where Hadoop is the contract (`filesystem` catalogs, whose tables Hadoop's
 * FileSystem versions, and Hive tables), the catalog sets `lakewarden.s3-client` to `s3a` and S3 goes through
 * Hadoop's S3A with the catalog's keys, one FileSystem per set of settings (Hadoop's cache is keyed by bucket and
 * user only, so two catalogs of one bucket would share one client).
 *
 * <p>What is added to S3FileIO:
 *
 * <ul>
 *   <li>every operation is watched by the store's StoreSilence: a store silent for the catalog's storage timeout
 *       ends the task, and a refusal names the object it was about (StoreRefusal);
 *   <li>its streams are held (ClientFiles: Parquet would otherwise unwrap and drop them);
 *   <li>a credential's prefix counts for the same object however its scheme is spelt (s3, s3a, s3n);
 *   <li>a bulk delete asks each object's own client (S3FileIO sends the last batch of each bucket with the
 *       bucket's client, which holds no vended credential, and only logs what that batch failed to delete);
 *   <li>read-ahead of small objects, whole and in one request each (ReadAhead).
 * </ul>
 *
 * <p>Local files are read and written with java.io (LocalFiles: Hadoop's local FileSystem starts a process for
 * every file it creates).
 */
public class StorageFileIO extends HadoopFileIO implements SupportsStorageCredentials {
  static final String PREFIX = "fs.s3a.lakewarden.";
  /** Which client reaches S3: `s3fileio` (Iceberg's S3FileIO, the default) or `s3a` (Hadoop's S3A). */
  static final String S3_CLIENT = "lakewarden.s3-client";
  private static final int FILE_SYSTEMS_KEPT = 256;
  // S3A clients by their settings, least recently used first; one evicted is closed
  private static final Map<String, FileSystem> FILE_SYSTEMS =
      new java.util.LinkedHashMap<String, FileSystem>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, FileSystem> eldest) {
          if (size() <= FILE_SYSTEMS_KEPT) {
            return false;
          }
          try {
            eldest.getValue().close();
          } catch (IOException e) {
            // closing a client of settings nobody uses any more: nothing to do about it
          }
          return true;
        }
      };
  private static final int DELETE_RETRIES = 3;
  private static final int DELETE_BATCH = 1000; // S3's DeleteObjects takes at most this many keys
  private static volatile ExecutorService deletes;

  static final String READ_PARALLELISM = "lakewarden.read-parallelism";
  static final int DEFAULT_READ_PARALLELISM = 16;
  private static final Cleaner CLOSES = Cleaner.create();

  private ArrayList<StorageCredential> storageCredentials = new ArrayList<>();
  private transient volatile S3FileIO s3;

  @Override
  public void setCredentials(List<StorageCredential> credentials) {
    this.storageCredentials = new ArrayList<>(credentials);
    this.s3 = null; // made again, with these
  }

  @Override
  public List<StorageCredential> credentials() {
    return storageCredentials;
  }

  private boolean throughHadoop() {
    return "s3a".equalsIgnoreCase(properties().getOrDefault(S3_CLIENT, "s3fileio").trim());
  }

  /** The S3FileIO this one delegates S3 to, made from its properties and credentials on first use. */
  S3FileIO s3() {
    S3FileIO made = s3;
    if (made != null) {
      return made;
    }
    synchronized (this) {
      if (s3 == null) {
        Map<String, String> properties = new java.util.HashMap<>(properties());
        // pyiceberg's name of the region (a catalog's own `s3.*` settings) is not read by S3FileIO
        String region = properties.get("s3.region");
        if (region != null && !region.isEmpty()) {
          properties.putIfAbsent("client.region", region);
        }
        properties.putIfAbsent("client.factory", BoundedS3Clients.class.getName());
        S3FileIO io = new S3FileIO();
        // S3FileIO matches a credential to a path by its literal prefix: the same prefix in each spelling
        List<StorageCredential> spelt = new ArrayList<>();
        for (StorageCredential credential : storageCredentials) {
          if (!isS3(credential.prefix())) {
            continue;
          }
          String rest = credential.prefix().substring(credential.prefix().indexOf("://"));
          for (String scheme : new String[] {"s3", "s3a", "s3n"}) {
            spelt.add(StorageCredential.create(scheme + rest, credential.config()));
          }
        }
        io.setCredentials(spelt);
        io.initialize(properties);
        // a FileIO is seldom closed (a task's copy on an executor never is): its S3FileIO goes with it
        CLOSES.register(this, io::close);
        s3 = io;
      }
      return s3;
    }
  }

  private StoreSilence watch(String location) {
    S3FileIO io = s3();
    return StoreSilence.of(properties(), location, () -> io.client(location));
  }

  @Override
  public void close() {
    S3FileIO made = s3;
    if (made != null) {
      made.close();
    }
    super.close();
  }

  static boolean isS3(String location) {
    String lower = location.toLowerCase(Locale.ROOT);
    return lower.startsWith("s3://") || lower.startsWith("s3a://") || lower.startsWith("s3n://");
  }

  /** `s3a://b/k` and `s3n://b/k` name the object `s3://b/k` names: prefixes are compared in that form. */
  static String normalized(String location) {
    int colon = location.indexOf("://");
    return "s3" + location.substring(colon);
  }

  static String bucketOf(String location) {
    String object = normalized(location).substring("s3://".length());
    int slash = object.indexOf('/');
    String bucket = slash < 0 ? object : object.substring(0, slash);
    if (bucket.isEmpty()) {
      throw new IllegalArgumentException("no bucket in " + location);
    }
    return bucket;
  }

  /** The object's key: the location after its bucket, as written (never URL-decoded). */
  static String keyOf(String location) {
    String object = normalized(location).substring("s3://".length());
    int slash = object.indexOf('/');
    return slash < 0 ? "" : object.substring(slash + 1);
  }

  /** The Hadoop configuration of the S3A client for `location`, and the identity of its settings. */
  Configuration s3Conf(String location) {
    Map<String, String> properties = properties();
    String scheme = location.substring(0, location.indexOf("://")).toLowerCase(Locale.ROOT);
    String bucket = bucketOf(location);
    Configuration conf = new Configuration(getConf());
    conf.set("fs." + scheme + ".impl", "org.apache.hadoop.fs.s3a.S3AFileSystem");
    String endpoint = properties.get("s3.endpoint");
    if (endpoint != null && !endpoint.isEmpty()) {
      conf.set("fs.s3a.endpoint", endpoint);
      conf.setBoolean("fs.s3a.connection.ssl.enabled", endpoint.startsWith("https"));
    }
    String region = properties.getOrDefault("s3.region", properties.get("client.region"));
    if (region != null && !region.isEmpty()) {
      conf.set("fs.s3a.endpoint.region", region);
    }
    if (properties.containsKey("s3.path-style-access")) {
      conf.setBoolean("fs.s3a.path.style.access", Boolean.parseBoolean(properties.get("s3.path-style-access")));
    }
    String keyId = properties.get("s3.access-key-id");
    String identity;
    if (keyId != null && !keyId.isEmpty()) {
      conf.set("fs.s3a.access.key", keyId);
      conf.set("fs.s3a.secret.key", properties.getOrDefault("s3.secret-access-key", ""));
      String session = properties.get("s3.session-token");
      if (session != null && !session.isEmpty()) {
        conf.set("fs.s3a.session.token", session);
        conf.set(
            "fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider");
        identity = "session|" + keyId;
      } else {
        conf.set(
            "fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider");
        identity = "keys|" + keyId;
      }
    } else {
      identity = "default"; // the session's own S3A settings (or the environment's)
    }
    // a catalog's timeouts are part of its client's identity: a client made with other ones is not reused
    String bounds =
        String.join(
            "/",
            String.valueOf(conf.get("fs.s3a.connection.establish.timeout")),
            String.valueOf(conf.get("fs.s3a.connection.timeout")),
            String.valueOf(conf.get("fs.s3a.attempts.maximum")),
            String.valueOf(conf.get("fs.s3a.retry.limit")),
            String.valueOf(conf.get("fs.s3a.retry.interval")));
    conf.set(
        PREFIX + "identity", String.join("|", scheme, bucket, String.valueOf(endpoint), identity, bounds));
    return conf;
  }

  private static StoreSilence silence(FileSystem fs, String location) {
    return StoreSilence.of(fs.getConf(), bucketOf(location));
  }

  FileSystem fs(String location) {
    Configuration conf = s3Conf(location);
    String key = conf.get(PREFIX + "identity");
    synchronized (FILE_SYSTEMS) {
      FileSystem known = FILE_SYSTEMS.get(key);
      if (known != null) {
        return known;
      }
      try {
        String scheme = location.substring(0, location.indexOf("://"));
        FileSystem made = FileSystem.newInstance(URI.create(scheme + "://" + bucketOf(location) + "/"), conf);
        FILE_SYSTEMS.put(key, made);
        return made;
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  @Override
  public InputFile newInputFile(String path) {
    if (LocalFiles.isLocal(path)) {
      return LocalFiles.input(path);
    }
    if (!isS3(path)) {
      return super.newInputFile(path);
    }
    if (!throughHadoop()) {
      return new ClientFiles.ClientInputFile(s3().newInputFile(path), watch(path));
    }
    FileSystem fs = fs(path);
    return new ClientFiles.ClientInputFile(
        HadoopInputFile.fromPath(new Path(path), fs, fs.getConf()), silence(fs, path));
  }

  @Override
  public InputFile newInputFile(String path, long length) {
    if (LocalFiles.isLocal(path)) {
      return LocalFiles.input(path, length);
    }
    if (!isS3(path)) {
      return super.newInputFile(path, length);
    }
    StoreSilence silence;
    InputFile file;
    StoreSilence.StoreCall<byte[]> whole;
    if (throughHadoop()) {
      FileSystem fs = fs(path);
      silence = silence(fs, path);
      file = HadoopInputFile.fromPath(new Path(path), length, fs, fs.getConf());
      whole = () -> whole(fs, new Path(path), length);
    } else {
      silence = watch(path);
      file = s3().newInputFile(path, length);
      InputFile unwatched = file;
      whole = () -> ReadAhead.whole(unwatched, length);
    }
    InputFile watched = new ClientFiles.ClientInputFile(file, silence);
    int parallelism = PropertyUtil.propertyAsInt(properties(), READ_PARALLELISM, DEFAULT_READ_PARALLELISM);
    return ReadAhead.of(watched, length, parallelism, silence, whole);
  }

  /** An object's bytes through S3A in one request: opened with its length known (no request for its status). */
  private static byte[] whole(FileSystem fs, Path path, long length) throws IOException {
    byte[] data = new byte[(int) length];
    // S3A takes a status of its own kind only (a plain FileStatus is looked up again, a request more)
    FileStatus known = new S3AFileStatus(length, 0, fs.makeQualified(path), 0, null, null, null);
    FSDataInputStream in;
    try {
      in = fs.openFile(path).withFileStatus(known).build().get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted opening " + path);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof IOException) {
        throw (IOException) e.getCause();
      }
      throw new IOException(e.getCause());
    }
    try (FSDataInputStream opened = in) {
      opened.readFully(0, data);
    }
    return data;
  }


  @Override
  public OutputFile newOutputFile(String path) {
    if (LocalFiles.isLocal(path)) {
      return LocalFiles.output(path);
    }
    if (!isS3(path)) {
      return super.newOutputFile(path);
    }
    if (!throughHadoop()) {
      return new ClientFiles.ClientOutputFile(s3().newOutputFile(path), watch(path));
    }
    FileSystem fs = fs(path);
    return new ClientFiles.ClientOutputFile(
        HadoopOutputFile.fromPath(new Path(path), fs, fs.getConf()), silence(fs, path));
  }

  @Override
  public void deleteFile(String path) {
    if (LocalFiles.isLocal(path)) {
      LocalFiles.delete(path);
      return;
    }
    if (!isS3(path)) {
      super.deleteFile(path);
      return;
    }
    if (!throughHadoop()) {
      S3FileIO io = s3();
      ClientFiles.unchecked(
          watch(path),
          () -> {
            io.deleteFile(path);
            return null;
          });
      return;
    }
    FileSystem fs = fs(path);
    try {
      silence(fs, path).call(() -> fs.delete(new Path(path), false /* one object, never a directory's contents */));
    } catch (IOException e) {
      throw new RuntimeIOException(e, "Failed to delete file: %s", path);
    }
  }

  @Override
  public void deleteFiles(Iterable<String> paths) throws BulkDeletionFailureException {
    AtomicInteger failures = new AtomicInteger(0);
    if (throughHadoop()) {
      deleteEach(paths, failures);
    } else {
      // S3 objects in batches of DeleteObjects, by the client of their credential and their bucket; others each
      List<String> elsewhere = new ArrayList<>();
      Map<List<Object>, List<String>> batches = new java.util.LinkedHashMap<>();
      List<Future<?>> sent = new ArrayList<>();
      S3FileIO io = s3();
      for (String path : paths) {
        if (!isS3(path)) {
          elsewhere.add(path);
          continue;
        }
        S3Client client = io.client(path);
        List<Object> key = List.of(client, bucketOf(path));
        List<String> batch = batches.computeIfAbsent(key, k -> new ArrayList<>());
        batch.add(path);
        if (batch.size() == DELETE_BATCH) {
          batches.remove(key);
          sent.add(deletes().submit(() -> deleteBatch(client, batch, failures)));
        }
      }
      for (Map.Entry<List<Object>, List<String>> batch : batches.entrySet()) {
        S3Client client = (S3Client) batch.getKey().get(0);
        sent.add(deletes().submit(() -> deleteBatch(client, batch.getValue(), failures)));
      }
      deleteEach(elsewhere, failures);
      for (Future<?> batch : sent) {
        try {
          batch.get();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          sent.forEach(b -> b.cancel(true));
          throw new RuntimeIOException(new InterruptedIOException("interrupted deleting files"));
        } catch (ExecutionException e) {
          if (e.getCause() instanceof Error) {
            throw (Error) e.getCause(); // a store silent for the whole timeout
          }
          throw new RuntimeIOException(new IOException(e.getCause()), "Failed to delete files");
        }
      }
    }
    if (failures.get() != 0) {
      throw new BulkDeletionFailureException(failures.get());
    }
  }

  private void deleteEach(Iterable<String> paths, AtomicInteger failures) {
    Tasks.foreach(paths)
        .executeWith(deletes())
        .retry(DELETE_RETRIES)
        .stopRetryOn(java.io.FileNotFoundException.class)
        .suppressFailureWhenFinished()
        .onFailure((path, e) -> failures.incrementAndGet())
        .run(this::deleteFile);
  }

  /**
   * One DeleteObjects request for up to DELETE_BATCH objects of one bucket, retried for the objects it could not
   * delete; what is still not deleted after DELETE_RETRIES counts as failed. An object that is not there counts as
   * deleted (S3 answers so itself).
   */
  private void deleteBatch(S3Client client, List<String> paths, AtomicInteger failures) {
    String bucket = bucketOf(paths.get(0));
    StoreSilence silence = watch(paths.get(0));
    List<String> left = new ArrayList<>();
    for (String path : paths) {
      left.add(keyOf(path));
    }
    for (int attempt = 0; attempt <= DELETE_RETRIES && !left.isEmpty(); attempt++) {
      List<ObjectIdentifier> objects = new ArrayList<>();
      for (String key : left) {
        objects.add(ObjectIdentifier.builder().key(key).build());
      }
      DeleteObjectsRequest request =
          DeleteObjectsRequest.builder()
              .bucket(bucket)
              .delete(Delete.builder().objects(objects).quiet(true).build())
              .build();
      try {
        DeleteObjectsResponse answer = ClientFiles.unchecked(silence, () -> client.deleteObjects(request));
        List<String> failed = new ArrayList<>();
        for (S3Error error : answer.errors()) {
          failed.add(error.key());
        }
        left = failed;
      } catch (StoreRefusal e) {
        break; // the same request is refused again
      } catch (RuntimeException e) {
        // the whole request failed after the client's own retries: the next attempt sends it again
      }
    }
    failures.addAndGet(left.size());
  }

  private static ExecutorService deletes() {
    if (deletes == null) {
      synchronized (StorageFileIO.class) {
        if (deletes == null) {
          deletes = ThreadPools.newExitingWorkerPool("lakewarden-storage-delete", 16);
        }
      }
    }
    return deletes;
  }

  @Override
  public Iterable<FileInfo> listPrefix(String prefix) {
    if (!isS3(prefix)) {
      return super.listPrefix(prefix);
    }
    if (!throughHadoop()) {
      S3FileIO io = s3();
      StoreSilence silence = watch(prefix);
      return () -> {
        Iterator<FileInfo> found = ClientFiles.unchecked(silence, () -> io.listPrefix(prefix).iterator());
        return new Iterator<FileInfo>() {
          @Override
          public boolean hasNext() {
            return ClientFiles.unchecked(silence, found::hasNext); // a page is fetched here when one ends
          }

          @Override
          public FileInfo next() {
            return ClientFiles.unchecked(silence, found::next);
          }
        };
      };
    }
    FileSystem fs = fs(prefix);
    StoreSilence silence = silence(fs, prefix);
    Path root = new Path(prefix);
    return () -> {
      try {
        RemoteIterator<LocatedFileStatus> found =
            silence.call(() -> fs.listFiles(root, true /* recursive: pages through it */));
        return new Iterator<FileInfo>() {
          @Override
          public boolean hasNext() {
            try {
              return silence.call(found::hasNext);
            } catch (IOException e) {
              throw new UncheckedIOException(e);
            }
          }

          @Override
          public FileInfo next() {
            try {
              LocatedFileStatus status = silence.call(found::next);
              return new FileInfo(status.getPath().toString(), status.getLen(), status.getModificationTime());
            } catch (IOException e) {
              throw new UncheckedIOException(e);
            }
          }
        };
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    };
  }

  @Override
  public void deletePrefix(String prefix) {
    if (!isS3(prefix)) {
      super.deletePrefix(prefix);
      return;
    }
    if (!throughHadoop()) {
      // what is listed under the prefix, in batches; a prefix is a directory's: `t1` never takes `t10/…`
      String under = prefix.endsWith("/") ? prefix : prefix + "/";
      deleteFiles(() -> Streams.stream(listPrefix(under)).map(FileInfo::location).iterator());
      return;
    }
    FileSystem fs = fs(prefix);
    try {
      silence(fs, prefix).call(() -> fs.delete(new Path(prefix), true));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
