/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.Table;
import org.apache.iceberg.deletes.BaseDVFileWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * Deletion vectors (format version 3) for data files, from the positions of their deleted rows, written by
 * Iceberg's own writer into one Puffin file. Here rather than in Python: the writer asks for a Java function
 * (the file's vector before, which the positions already include), and the positions are read row by row,
 * which through py4j would cost a round trip each.
 */
public final class DeletionVectors {
  private DeletionVectors() {}

  /**
   * One vector for each data file of `tasks` that `deleted` (columns `_file`, `_pos`) names: every position
   * it lists for that file. Returns the vectors, uncommitted.
   */
  public static List<DeleteFile> write(Table table, List<FileScanTask> tasks, Dataset<Row> deleted)
      throws IOException {
    Map<String, FileScanTask> byPath = new HashMap<>();
    for (FileScanTask task : tasks) {
      byPath.put(task.file().location(), task);
    }
    OutputFileFactory files = OutputFileFactory.builderFor(table, 0, 0).format(FileFormat.PUFFIN).build();
    BaseDVFileWriter writer = new BaseDVFileWriter(files, path -> null);
    try {
      for (Row row : deleted.select("_file", "_pos").collectAsList()) {
        FileScanTask task = byPath.get(row.getString(0));
        if (task == null) {
          throw new IllegalStateException("a deleted row of a file not staged: " + row.getString(0));
        }
        writer.delete(task.file().location(), row.getLong(1), task.spec(), task.file().partition());
      }
    } finally {
      writer.close();
    }
    return writer.result().deleteFiles();
  }
}
