/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.IOException;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.PositionOutputStream;
import org.apache.iceberg.io.RangeReadable;
import org.apache.iceberg.io.SeekableInputStream;

/** The files StorageFileIO hands out for S3 locations, reached through the client made for their credentials. */
final class ClientFiles {
  private ClientFiles() {}

  /**
   * A file read through the client made for its credentials. Deliberately not a HadoopInputFile: Iceberg hands
   * a HadoopInputFile's path and configuration to Parquet, which looks its FileSystem up again in Hadoop's
   * cache, keyed by bucket and user only, and would read through whichever client reached that bucket first
   * (another table's credentials, another catalog's endpoint).
   */
  static final class ClientInputFile implements InputFile {
    private final InputFile file;

    ClientInputFile(InputFile file) {
      this.file = file;
    }

    @Override
    public long getLength() {
      return file.getLength();
    }

    @Override
    public SeekableInputStream newStream() {
      return new HeldInputStream(file.newStream());
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

  /** A file written through the client made for its credentials; not a HadoopOutputFile, as for reads. */
  static final class ClientOutputFile implements OutputFile {
    private final OutputFile file;

    ClientOutputFile(OutputFile file) {
      this.file = file;
    }

    @Override
    public PositionOutputStream create() {
      return new HeldOutputStream(file.create());
    }

    @Override
    public PositionOutputStream createOrOverwrite() {
      return new HeldOutputStream(file.createOrOverwrite());
    }

    @Override
    public String location() {
      return file.location();
    }

    @Override
    public InputFile toInputFile() {
      return new ClientInputFile(file.toInputFile());
    }
  }

  /**
   * Iceberg's stream over a Hadoop stream, held. Parquet takes the Hadoop stream out of a stream that offers it
   * (DelegatingInputStream) and drops the wrapper, whose finalizer then closes the stream under the reader; this
   * one offers nothing, so Parquet reads through it and the stream lives as long as its reader.
   */
  static final class HeldInputStream extends SeekableInputStream implements RangeReadable {
    private final SeekableInputStream stream;

    HeldInputStream(SeekableInputStream stream) {
      this.stream = stream;
    }

    @Override
    public long getPos() throws IOException {
      return stream.getPos();
    }

    @Override
    public void seek(long newPos) throws IOException {
      stream.seek(newPos);
    }

    @Override
    public int read() throws IOException {
      return stream.read();
    }

    @Override
    public int read(byte[] into, int offset, int count) throws IOException {
      return stream.read(into, offset, count);
    }

    @Override
    public long skip(long n) throws IOException {
      return stream.skip(n);
    }

    @Override
    public int available() throws IOException {
      return stream.available();
    }

    @Override
    public void readFully(long position, byte[] into, int offset, int length) throws IOException {
      ((RangeReadable) stream).readFully(position, into, offset, length);
    }

    @Override
    public int readTail(byte[] into, int offset, int length) throws IOException {
      return ((RangeReadable) stream).readTail(into, offset, length);
    }

    @Override
    public void close() throws IOException {
      stream.close();
    }
  }

  /** Iceberg's stream over a Hadoop output stream, held for the reason HeldInputStream gives. */
  static final class HeldOutputStream extends PositionOutputStream {
    private final PositionOutputStream stream;

    HeldOutputStream(PositionOutputStream stream) {
      this.stream = stream;
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
      stream.write(b);
    }

    @Override
    public void write(byte[] b, int off, int len) throws IOException {
      stream.write(b, off, len);
    }

    @Override
    public void flush() throws IOException {
      stream.flush();
    }

    @Override
    public void close() throws IOException {
      stream.close();
    }
  }
}
