/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Locale;
import org.apache.hadoop.fs.Path;
import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.exceptions.RuntimeIOException;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;
import org.apache.iceberg.io.PositionOutputStream;
import org.apache.iceberg.io.SeekableInputStream;

/**
 * Files on the local disk, read and written with java.io rather than Hadoop's LocalFileSystem. Hadoop creates
 * every file with a permission, which without its native library means starting a `chmod` process, twice (the
 * file and its `.crc` checksum): a commit that rewrites hundreds of manifests spends most of its time forking.
 * Each file keeps the location it was asked for, exactly (`file:/…` or a bare path), as that string is what
 * Iceberg records in its metadata. Checksum files that Hadoop wrote beside older files are deleted with them.
 */
final class LocalFiles {
  private LocalFiles() {}

  /** A location on the local disk: a `file:` URI or a path without a scheme. */
  static boolean isLocal(String location) {
    if (location.startsWith("/")) {
      return true;
    }
    return location.toLowerCase(Locale.ROOT).startsWith("file:");
  }

  static File file(String location) {
    return new File(new Path(location).toUri().getPath());
  }

  static InputFile input(String location) {
    return new LocalInput(location, file(location), -1);
  }

  static InputFile input(String location, long length) {
    return new LocalInput(location, file(location), length);
  }

  static OutputFile output(String location) {
    return new LocalOutput(location, file(location));
  }

  /** Deletes the file (and a checksum file Hadoop wrote beside it); a file already gone is not an error. */
  static void delete(String location) {
    File file = file(location);
    try {
      Files.deleteIfExists(file.toPath());
      Files.deleteIfExists(new File(file.getParentFile(), "." + file.getName() + ".crc").toPath());
    } catch (IOException e) {
      throw new RuntimeIOException(e, "Failed to delete file: %s", location);
    }
  }

  private static final class LocalInput implements InputFile {
    private final String location;
    private final File file;
    private final long length;

    LocalInput(String location, File file, long length) {
      this.location = location;
      this.file = file;
      this.length = length;
    }

    @Override
    public long getLength() {
      if (length >= 0) {
        return length;
      }
      if (!file.exists()) {
        throw new NotFoundException("File does not exist: %s", location);
      }
      return file.length();
    }

    @Override
    public SeekableInputStream newStream() {
      if (!file.exists()) {
        throw new NotFoundException("File does not exist: %s", location);
      }
      return org.apache.iceberg.Files.localInput(file).newStream();
    }

    @Override
    public String location() {
      return location;
    }

    @Override
    public boolean exists() {
      return file.exists();
    }

    @Override
    public String toString() {
      return location;
    }
  }

  private static final class LocalOutput implements OutputFile {
    private final String location;
    private final File file;

    LocalOutput(String location, File file) {
      this.location = location;
      this.file = file;
    }

    @Override
    public PositionOutputStream create() {
      try {
        // made here, not by Iceberg's local file, which fails when a concurrent writer made it first
        Files.createDirectories(file.getParentFile().toPath());
      } catch (IOException e) {
        throw new RuntimeIOException(e, "Failed to create the directory of %s", location);
      }
      return org.apache.iceberg.Files.localOutput(file).create();
    }

    @Override
    public PositionOutputStream createOrOverwrite() {
      delete(location); // with a checksum file Hadoop left, which would no longer match
      return create();
    }

    @Override
    public String location() {
      return location;
    }

    @Override
    public InputFile toInputFile() {
      return new LocalInput(location, file, -1);
    }

    @Override
    public String toString() {
      return location;
    }
  }
}
