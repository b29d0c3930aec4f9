/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.IOException;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;
import software.amazon.awssdk.services.s3.S3Client;

/**
 * Ends the wait on an object store that stopped answering, within the catalog's storage timeout.
 *
 * <p>The client's own retries are bounded to half the timeout (the catalog's `hadoop.fs.s3a.*` options that
 * spark/session.py derives), but Iceberg retries what fails above the client: a catalog's metadata refresh
 * twenty times with back-off, a bulk delete per file. So every operation on a store goes through here: an
 * operation that fails because the store did not answer (a connection refused or timed out, a socket that stayed
 * silent) marks the store silent, any answer clears the mark, and a silent failure once the store has been silent
 * for the timeout is thrown as a {@link StoreSilentError}, which no retry loop catches (they catch Exception).
 */
final class StoreSilence {
  static final String TIMEOUT_MS = StorageFileIO.PREFIX + "timeout-ms";
  static final long DEFAULT_TIMEOUT_MS = 120_000L;
  static final String STORAGE_TIMEOUT_MS = "lakewarden.storage.timeout-ms"; // S3FileIO's: a FileIO property
  // what a client throws, somewhere in its cause chain, when the store did not answer at all
  private static final Set<String> SILENT =
      Set.of(
          "SocketTimeoutException",
          "ConnectException",
          "ConnectTimeoutException",
          "NoHttpResponseException",
          "NoRouteToHostException");
  // the first silent failure of each store since it last answered, by store (wall clock, ms)
  private static final Map<String, Long> SILENT_SINCE = new ConcurrentHashMap<>();

  private final String store;
  private final long timeoutMs;
  private final String location; // the object the operations are on, to name in a refusal; null for S3A's
  private final Supplier<S3Client> client; // S3FileIO's client of the location

  StoreSilence(String store, long timeoutMs) {
    this(store, timeoutMs, null, null);
  }

  private StoreSilence(String store, long timeoutMs, String location, Supplier<S3Client> client) {
    this.store = store;
    this.timeoutMs = timeoutMs;
    this.location = location;
    this.client = client;
  }

  /** The watch over the store a client reaches: its bucket at its endpoint, with the catalog's timeout. */
  static StoreSilence of(org.apache.hadoop.conf.Configuration conf, String bucket) {
    String endpoint = conf.getTrimmed("fs.s3a.endpoint", "");
    String store = "s3://" + bucket + (endpoint.isEmpty() ? "" : " at " + endpoint);
    return new StoreSilence(store, conf.getLong(TIMEOUT_MS, DEFAULT_TIMEOUT_MS));
  }

  /**
   * The watch over the store S3FileIO reaches for `location`, with the catalog's timeout (the FileIO property
   * `lakewarden.storage.timeout-ms`); a refusal of the AWS SDK is thrown as a StoreRefusal naming the object.
   */
  static StoreSilence of(Map<String, String> properties, String location, Supplier<S3Client> client) {
    String endpoint = properties.getOrDefault("s3.endpoint", "").trim();
    String store = "s3://" + StorageFileIO.bucketOf(location) + (endpoint.isEmpty() ? "" : " at " + endpoint);
    long timeoutMs =
        org.apache.iceberg.util.PropertyUtil.propertyAsLong(properties, STORAGE_TIMEOUT_MS, DEFAULT_TIMEOUT_MS);
    return new StoreSilence(store, timeoutMs, location, client);
  }

  interface StoreCall<T> {
    T call() throws IOException;
  }

  interface StoreAction {
    void run() throws IOException;
  }

  /** Runs one operation on the store, noting whether it answered. */
  <T> T call(StoreCall<T> operation) throws IOException {
    try {
      T result = operation.call();
      if (!SILENT_SINCE.isEmpty()) { // the common case costs no hash lookup
        SILENT_SINCE.remove(store);
      }
      return result;
    } catch (IOException e) {
      throw failed(e);
    } catch (RuntimeException e) {
      throw failed(location == null ? e : StoreRefusal.of(location, e, client));
    }
  }

  /**
   * Runs an operation that may not reach the store at all (opening an S3FileIO stream sends nothing until it is
   * read): its failure counts, its success is no sign that the store answered.
   */
  <T> T open(StoreCall<T> operation) throws IOException {
    try {
      return operation.call();
    } catch (IOException e) {
      throw failed(e);
    } catch (RuntimeException e) {
      throw failed(location == null ? e : StoreRefusal.of(location, e, client));
    }
  }

  void run(StoreAction operation) throws IOException {
    call(
        () -> {
          operation.run();
          return null;
        });
  }

  /** The failure to throw: `e` itself, or a StoreSilentError once the store has been silent for the timeout. */
  <E extends Exception> E failed(E e) {
    if (!silent(e)) {
      SILENT_SINCE.remove(store); // a refusal (403, 404) is an answer
      return e;
    }
    long now = System.currentTimeMillis();
    Long since = SILENT_SINCE.putIfAbsent(store, now);
    // the first silent failure came after the client had already retried for about half the timeout
    long silentMs = (since == null ? 0 : now - since) + timeoutMs / 2;
    if (since != null && silentMs >= timeoutMs) {
      throw new StoreSilentError(store, silentMs, timeoutMs, e);
    }
    return e;
  }

  static boolean silent(Throwable e) {
    for (Throwable cause = e; cause != null; cause = cause.getCause()) {
      if (cause instanceof StoreSilentError || SILENT.contains(cause.getClass().getSimpleName())) {
        return true;
      }
      if (cause.getCause() == cause) {
        break;
      }
    }
    return false;
  }

  /** Thrown instead of an exception so that no retry loop retries it: see StoreSilence. */
  static final class StoreSilentError extends Error {
    StoreSilentError(String store, long silentMs, long timeoutMs, Throwable cause) {
      super(
          String.format(
              "%s did not answer for %d s: the task ends here (%s = %d)",
              store, silentMs / 1000, STORAGE_TIMEOUT_MS, timeoutMs),
          cause);
    }
  }
}
