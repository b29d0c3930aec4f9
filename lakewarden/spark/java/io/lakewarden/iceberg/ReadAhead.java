/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.EOFException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.lang.ref.Cleaner;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.iceberg.exceptions.RuntimeIOException;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.RangeReadable;
import org.apache.iceberg.io.SeekableInputStream;
import org.apache.iceberg.util.ThreadPools;

/**
 * StorageFileIO's read-ahead of small objects: on an object store every file read costs a round trip or more, and
 * a Spark task reads its split's files one after the other. Iceberg's Spark reader asks for the InputFile of every
 * file of its split before it reads the first; a small object (up to WHOLE_OBJECT_BYTES) asked for with its length
 * is then fetched whole, in one request, by a pool of `lakewarden.read-parallelism` threads (per process; 1 turns
 * it off), so that the reader finds the next files already there. What is fetched and not yet read is bounded by
 * READ_AHEAD_BYTES per process; past it a file is read as usual.
 */
final class ReadAhead {
  static final long WHOLE_OBJECT_BYTES = 4L << 20;
  static final long READ_AHEAD_BYTES = 128L << 20;
  private static final AtomicLong READ_AHEAD = new AtomicLong(); // bytes fetched ahead, not yet handed to a reader
  private static final Map<Integer, ExecutorService> READERS = new ConcurrentHashMap<>();
  private static final Cleaner RELEASES = Cleaner.create();

  private ReadAhead() {}

  /**
   * `file` itself, or `file` fetched ahead by `whole` (the object's bytes in one request, watched by `silence`)
   * when it is small and the process's read-ahead has room for it.
   */
  static InputFile of(
      InputFile file, long length, int parallelism, StoreSilence silence, StoreSilence.StoreCall<byte[]> whole) {
    if (parallelism <= 1 || length > WHOLE_OBJECT_BYTES || !reserve(length)) {
      return file;
    }
    ExecutorService readers =
        READERS.computeIfAbsent(
            parallelism, n -> ThreadPools.newExitingWorkerPool("lakewarden-read-ahead-" + n, n));
    return new ReadAheadFile(file, length, readers.submit(() -> silence.call(whole)));
  }

  /** An object's bytes through S3FileIO in one ranged GET (its stream opens nothing until it is read). */
  static byte[] whole(InputFile file, long length) throws IOException {
    byte[] data = new byte[(int) length];
    try (SeekableInputStream in = file.newStream()) {
      ((RangeReadable) in).readFully(0, data, 0, (int) length);
    }
    return data;
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

    ReadAheadFile(InputFile file, long length, Future<byte[]> bytes) {
      this.file = file;
      this.length = length;
      this.bytes = bytes;
      this.release = RELEASES.register(this, new Release(length));
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
}
