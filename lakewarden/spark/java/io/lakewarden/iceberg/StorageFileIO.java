/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.EOFException;
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
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.fs.s3a.S3AFileStatus;
import org.apache.iceberg.exceptions.RuntimeIOException;
import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.hadoop.HadoopInputFile;
import org.apache.iceberg.hadoop.HadoopOutputFile;
import org.apache.iceberg.io.BulkDeletionFailureException;
import org.apache.iceberg.io.FileInfo;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.SeekableInputStream;
import org.apache.iceberg.io.StorageCredential;
import org.apache.iceberg.io.SupportsStorageCredentials;
import org.apache.iceberg.util.PropertyUtil;
import org.apache.iceberg.util.Tasks;
import org.apache.iceberg.util.ThreadPools;

/**
 * Iceberg's HadoopFileIO, reaching S3 through Hadoop's S3A with the settings a catalog gives its tables: the
 * storage profile in a table's `config` (s3.endpoint, s3.region / client.region, s3.path-style-access), static
 * keys (s3.access-key-id, s3.secret-access-key), and the credentials a REST catalog vends for a table's prefixes
 * (`storage-credentials`), renewed before they expire through the catalog's refresh endpoint
 * (VendedCredentialsProvider).
 *
 * <p>HadoopFileIO reads every file through the Hadoop configuration of the Spark session, whose FileSystem
 * cache is keyed by bucket and user, not by credentials: two tables of one bucket with credentials scoped to
 * each would share one client. Here every S3 location is reached through a FileSystem made for the
 * credentials that apply to it (the storage credential with the longest prefix of the location, else the
 * catalog's keys), kept in a process-wide cache keyed by those credentials' identity, so that tasks on
 * executors share them too. Local files are read and written with java.io (LocalFiles: Hadoop's local FileSystem
 * starts a process for every file it creates); other schemes (HDFS) are HadoopFileIO's.
 *
 * <p>Read-ahead: on an object store every file read costs a round trip or more, and a Spark task reads its
 * split's files one after the other. Iceberg's Spark reader asks for the InputFile of every file of its split
 * before it reads the first; a small object (up to WHOLE_OBJECT_BYTES) asked for with its length is then fetched
 * whole, in one request, by a pool of `lakewarden.read-parallelism` threads (per process; 1 turns it off), so
 * that the reader finds the next files already there. What is fetched and not yet read is bounded by
 * READ_AHEAD_BYTES per process; past it a file is read as usual.
 */
public class StorageFileIO extends HadoopFileIO implements SupportsStorageCredentials {
  static final String PREFIX = "fs.s3a.lakewarden.";
  private static final int FILE_SYSTEMS_KEPT = 256;
  // clients by the identity of their credentials, least recently used first; one evicted is closed
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
            // closing a client of credentials nobody uses any more: nothing to do about it
          }
          return true;
        }
      };
  private static final int DELETE_RETRIES = 3;
  private static volatile ExecutorService deletes;

  static final String READ_PARALLELISM = "lakewarden.read-parallelism";
  static final int DEFAULT_READ_PARALLELISM = 16;
  static final long WHOLE_OBJECT_BYTES = 4L << 20;
  static final long READ_AHEAD_BYTES = 128L << 20;
  private static final AtomicLong READ_AHEAD = new AtomicLong(); // bytes fetched ahead, not yet handed to a reader
  private static final Map<Integer, ExecutorService> READERS = new ConcurrentHashMap<>();
  private static final Cleaner RELEASES = Cleaner.create();

  private ArrayList<StorageCredential> storageCredentials = new ArrayList<>();

  @Override
  public void setCredentials(List<StorageCredential> credentials) {
    this.storageCredentials = new ArrayList<>(credentials);
  }

  @Override
  public List<StorageCredential> credentials() {
    return storageCredentials;
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
    URI uri = URI.create(normalized(location));
    if (uri.getHost() == null) {
      throw new IllegalArgumentException("no bucket in " + location);
    }
    return uri.getHost();
  }

  /** The storage credential whose prefix is the longest one of `location`'s, or null. */
  public StorageCredential credentialFor(String location) {
    String object = normalized(location);
    StorageCredential best = null;
    for (StorageCredential credential : storageCredentials) {
      if (!isS3(credential.prefix())) {
        continue;
      }
      String prefix = normalized(credential.prefix());
      // whole path segments: the prefix `…/t1/` (or `…/t1`) covers `…/t1` and `…/t1/x`, never `…/t10/x`
      boolean under = (object + "/").startsWith(prefix.endsWith("/") ? prefix : prefix + "/");
      if (under && (best == null || prefix.length() > normalized(best.prefix()).length())) {
        best = credential;
      }
    }
    return best;
  }

  /** The Hadoop configuration of the S3A client for `location`, and the identity of its credentials. */
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
    StorageCredential vended = credentialFor(location);
    Map<String, String> keys = vended != null ? vended.config() : properties;
    String keyId = keys.get("s3.access-key-id");
    String identity;
    if (keyId != null && !keyId.isEmpty()) {
      conf.set("fs.s3a.access.key", keyId);
      conf.set("fs.s3a.secret.key", keys.getOrDefault("s3.secret-access-key", ""));
      String session = keys.get("s3.session-token");
      if (session != null && !session.isEmpty()) {
        conf.set("fs.s3a.session.token", session);
        conf.set("fs.s3a.aws.credentials.provider", VendedCredentialsProvider.class.getName());
        conf.set(PREFIX + "expires-at-ms", keys.getOrDefault("s3.session-token-expires-at-ms", ""));
        String endpointPath = properties.get("client.refresh-credentials-endpoint");
        String catalog = properties.get("uri");
        String token = properties.get("token");
        if (vended != null && endpointPath != null && catalog != null && token != null) {
          String base = catalog.endsWith("/") ? catalog : catalog + "/";
          conf.set(PREFIX + "refresh-url", endpointPath.contains("://") ? endpointPath : base + endpointPath);
          conf.set(PREFIX + "refresh-token", token);
          conf.set(PREFIX + "prefix", vended.prefix());
        }
        // a table's vended credentials: one client per table prefix, renewed in place where the catalog can be
        // asked again, else one per set of credentials (a later load of the table brings fresh ones)
        String renewable = conf.get(PREFIX + "refresh-url") != null ? "renewed" : keyId;
        identity = "vended|" + (vended != null ? normalized(vended.prefix()) : keyId) + "|" + renewable;
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
    FileSystem fs = fs(path);
    StoreSilence silence = silence(fs, path);
    InputFile file =
        new ClientFiles.ClientInputFile(HadoopInputFile.fromPath(new Path(path), length, fs, fs.getConf()), silence);
    int parallelism = PropertyUtil.propertyAsInt(properties(), READ_PARALLELISM, DEFAULT_READ_PARALLELISM);
    if (parallelism <= 1 || length > WHOLE_OBJECT_BYTES || !reserve(length)) {
      return file;
    }
    ExecutorService readers =
        READERS.computeIfAbsent(
            parallelism, n -> ThreadPools.newExitingWorkerPool("lakewarden-read-ahead-" + n, n));
    return new ReadAheadFile(file, fs, new Path(path), length, readers, silence);
  }

  private static boolean reserve(long bytes) {
    while (true) {
      long now = READ_AHEAD.get();
      if (now + bytes > READ_AHEAD_BYTES) {
        return false;
      }
      if (READ_AHEAD.compareAndSet(now, now + bytes)) {
        return true;
      }
    }
  }

  /** Gives a file's reserved bytes back once: when its reader takes them, or when nobody will. */
  private static final class Release implements Runnable {
    private final long bytes;
    private final AtomicBoolean done = new AtomicBoolean(false);

    Release(long bytes) {
      this.bytes = bytes;
    }

    @Override
    public void run() {
      if (done.compareAndSet(false, true)) {
        READ_AHEAD.addAndGet(-bytes);
      }
    }
  }

  /** A small object, fetched whole in the background as soon as it is asked for. */
  static final class ReadAheadFile implements InputFile {
    private final InputFile file;
    private final long length;
    private final Future<byte[]> bytes;
    private final Cleaner.Cleanable release;

    ReadAheadFile(
        InputFile file, FileSystem fs, Path path, long length, ExecutorService readers, StoreSilence silence) {
      this.file = file;
      this.length = length;
      this.bytes = readers.submit(() -> silence.call(() -> whole(fs, path, length)));
      this.release = RELEASES.register(this, new Release(length));
    }

    /** The object's bytes in one request: opened with its length known (no request for its status first). */
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
    public long getLength() {
      return length;
    }

    @Override
    public SeekableInputStream newStream() {
      try {
        return new Bytes(bytes.get());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RuntimeIOException(new InterruptedIOException("interrupted reading " + location()));
      } catch (ExecutionException e) {
        Throwable cause = e.getCause();
        if (cause instanceof IOException) {
          throw new RuntimeIOException((IOException) cause, "Failed to read %s", location());
        }
        if (cause instanceof RuntimeException) {
          throw (RuntimeException) cause;
        }
        throw new IllegalStateException(cause);
      } finally {
        release.clean();
      }
    }

    @Override
    public String location() {
      return file.location();
    }

    @Override
    public boolean exists() {
      return file.exists();
    }
  }

  /** A file's bytes, in memory, as Iceberg's readers seek and read them. */
  static final class Bytes extends SeekableInputStream {
    private final byte[] data;
    private int pos = 0;

    Bytes(byte[] data) {
      this.data = data;
    }

    @Override
    public long getPos() {
      return pos;
    }

    @Override
    public void seek(long newPos) throws IOException {
      if (newPos < 0 || newPos > data.length) {
        throw new EOFException("seek to " + newPos + " outside 0.." + data.length);
      }
      this.pos = (int) newPos;
    }

    @Override
    public int read() {
      return pos < data.length ? data[pos++] & 0xff : -1;
    }

    @Override
    public int read(byte[] into, int offset, int count) {
      if (count == 0) {
        return 0;
      }
      if (pos >= data.length) {
        return -1;
      }
      int n = Math.min(count, data.length - pos);
      System.arraycopy(data, pos, into, offset, n);
      pos += n;
      return n;
    }

    @Override
    public long skip(long n) {
      long skipped = Math.max(0, Math.min(n, data.length - pos));
      pos += (int) skipped;
      return skipped;
    }

    @Override
    public int available() {
      return data.length - pos;
    }
  }

  @Override
  public OutputFile newOutputFile(String path) {
    if (LocalFiles.isLocal(path)) {
      return LocalFiles.output(path);
    }
    if (!isS3(path)) {
      return super.newOutputFile(path);
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
    Tasks.foreach(paths)
        .executeWith(deletes())
        .retry(DELETE_RETRIES)
        .stopRetryOn(java.io.FileNotFoundException.class)
        .suppressFailureWhenFinished()
        .onFailure((path, e) -> failures.incrementAndGet())
        .run(this::deleteFile);
    if (failures.get() != 0) {
      throw new BulkDeletionFailureException(failures.get());
    }
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
    FileSystem fs = fs(prefix);
    try {
      silence(fs, prefix).call(() -> fs.delete(new Path(prefix), true));
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
