/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.PositionOutputStream;
import org.apache.iceberg.io.RangeReadable;
import org.apache.iceberg.io.SeekableInputStream;

/**
 * The files StorageFileIO hands out for S3 locations, reached through the client made for their credentials, each
 * operation watched by the store's StoreSilence.
 */
final class ClientFiles {
  private ClientFiles() {}

  /** An operation that throws no checked exception (Iceberg's InputFile and OutputFile), watched. */
  static <T> T unchecked(StoreSilence silence, java.util.function.Supplier<T> operation) {
    try {
      return silence.call(operation::get);
    } catch (IOException e) {
      throw new UncheckedIOException(e); // not reached: the operation throws no IOException
    }
  }

  /** `unchecked` for an operation that may send nothing to the store (StoreSilence.open). */
  static <T> T opened(StoreSilence silence, java.util.function.Supplier<T> operation) {
    try {
      return silence.open(operation::get);
    } catch (IOException e) {
      throw new UncheckedIOException(e); // not reached: the operation throws no IOException
    }
  }

  /**
   * A file read through the client made for its credentials. Deliberately not a HadoopInputFile: Iceberg hands
   * a HadoopInputFile's path and configuration to Parquet, which looks its FileSystem up again in Hadoop's
   * cache, keyed by bucket and user only, and would read through whichever client reached that bucket first
   * (another table's credentials, another catalog's endpoint).
   */
  static final class ClientInputFile implements InputFile {
    private final InputFile file;
    private final StoreSilence silence;

    ClientInputFile(InputFile file, StoreSilence silence) {
      this.file = file;
      this.silence = silence;
    }

    @Override
    public long getLength() {
      return unchecked(silence, file::getLength);
    }

    @Override
    public SeekableInputStream newStream() {
      return new HeldInputStream(opened(silence, file::newStream), silence);
    }

    @Override
    public String location() {
      return file.location();
    }

    @Override
    public boolean exists() {
      return unchecked(silence, file::exists);
    }
  }

  /** A file written through the client made for its credentials; not a HadoopOutputFile, as for reads. */
  static final class ClientOutputFile implements OutputFile {
    private final OutputFile file;
    private final StoreSilence silence;

    ClientOutputFile(OutputFile file, StoreSilence silence) {
      this.file = file;
      this.silence = silence;
    }

    @Override
    public PositionOutputStream create() {
      return new HeldOutputStream(unchecked(silence, file::create), silence);
    }

    @Override
    public PositionOutputStream createOrOverwrite() {
      return new HeldOutputStream(opened(silence, file::createOrOverwrite), silence);
    }

    @Override
    public String location() {
      return file.location();
    }

    @Override
    public InputFile toInputFile() {
      return new ClientInputFile(file.toInputFile(), silence);
    }
  }

  /**
   * Iceberg's stream over a Hadoop stream, held. Parquet takes the Hadoop stream out of a stream that offers it
   * (DelegatingInputStream) and drops the wrapper, whose finalizer then closes the stream under the reader; this
   * one offers nothing, so Parquet reads through it and the stream lives as long as its reader.
   */
  static final class HeldInputStream extends SeekableInputStream implements RangeReadable {
    private final SeekableInputStream stream;
    private final StoreSilence silence;

    HeldInputStream(SeekableInputStream stream, StoreSilence silence) {
      this.stream = stream;
      this.silence = silence;
    }

    @Override
    public long getPos() throws IOException {
      return stream.getPos();
    }

    @Override
    public void seek(long newPos) throws IOException {
      silence.run(() -> stream.seek(newPos));
    }

    @Override
    public int read() throws IOException {
      return silence.call(stream::read);
    }

    @Override
    public int read(byte[] into, int offset, int count) throws IOException {
      return silence.call(() -> stream.read(into, offset, count));
    }

    @Override
    public long skip(long n) throws IOException {
      return silence.call(() -> stream.skip(n));
    }

    @Override
    public int available() throws IOException {
      return stream.available();
    }

    @Override
    public void readFully(long position, byte[] into, int offset, int length) throws IOException {
      silence.run(() -> ((RangeReadable) stream).readFully(position, into, offset, length));
    }

    @Override
    public int readTail(byte[] into, int offset, int length) throws IOException {
      return silence.call(() -> ((RangeReadable) stream).readTail(into, offset, length));
    }

    @Override
    public void close() throws IOException {
      stream.close();
    }
  }

  /** Iceberg's stream over a Hadoop output stream, held for the reason HeldInputStream gives. */
  static final class HeldOutputStream extends PositionOutputStream {
    private final PositionOutputStream stream;
    private final StoreSilence silence;

    HeldOutputStream(PositionOutputStream stream, StoreSilence silence) {
      this.stream = stream;
      this.silence = silence;
    }

    @Override
    public long getPos() throws IOException {
      return stream.getPos();
    }

    @Override
    public long storedLength() throws IOException {
      return stream.storedLength();
    }

    @Override
    public void write(int b) throws IOException {
      silence.run(() -> stream.write(b));
    }

    @Override
    public void write(byte[] b, int off, int len) throws IOException {
      silence.run(() -> stream.write(b, off, len));
    }

    @Override
    public void flush() throws IOException {
      silence.run(stream::flush);
    }

    @Override
    public void close() throws IOException {
      silence.run(stream::close);
    }
  }
}
