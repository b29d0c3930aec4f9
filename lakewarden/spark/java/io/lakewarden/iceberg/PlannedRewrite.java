/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.iceberg.ContentFile;
import org.apache.iceberg.ContentFileParser;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.RewriteFiles;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.util.ContentFileUtil;
import org.apache.iceberg.util.JsonUtil;

/**
 * The bookkeeping of one optimizing task around Spark's rewrite jobs: its planned files (PlannedFiles), what
 * each file group wrote, the one commit and the task's counts. Here rather than in Python because all of it is
 * per file: through py4j every file would cost several round trips, and for the small files streaming writers
 * leave those round trips cost more than Spark's own work. Python drives it with one call per task or file
 * group.
 */
public final class PlannedRewrite {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Table table;
  private final Snapshot snapshot;
  private final PlannedFiles planned;
  private final JsonNode work;
  private final List<DataFile> rewritten = new ArrayList<>();
  private final List<DataFile> written = new ArrayList<>();
  private final Map<Integer, List<DataFile>> writtenByGroup = new HashMap<>();
  // groups left out of the commit because a writer changed their files since the planned snapshot, and
  // what they wrote (deleted once the rest committed)
  private final Set<Integer> yielded = new TreeSet<>();
  private final List<ContentFile<?>> yieldedWritten = new ArrayList<>();
  private final List<DeleteFile> writtenDeletes = new ArrayList<>();
  private final List<DeleteFile> replaced = new ArrayList<>();
  private final List<DeleteFile> removedDeletes; // the delete files the commit removes
  private int positionsRewritten = 0;
  private boolean vectorsWritten = false;

  private PlannedRewrite(Table table, Snapshot snapshot, PlannedFiles planned, JsonNode work) {
    this.table = table;
    this.snapshot = snapshot;
    this.planned = planned;
    this.work = work;
    this.removedDeletes = new ArrayList<>(planned.removed().values());
  }

  /**
   * The task's planned files, found in its planned snapshot. `workJson` is the task's input as lakewarden's
   * protocol writes it (OptimizingInput). Fails with PlanMismatchException when the snapshot does not have
   * them as planned (PlannedFiles.find).
   */
  public static PlannedRewrite of(Table table, Snapshot snapshot, String workJson) throws IOException {
    JsonNode work = JSON.readTree(workJson);
    return new PlannedRewrite(table, snapshot, PlannedFiles.find(table, snapshot, work), work);
  }

  /**
   * A plan whose files were taken as it describes them is checked against its snapshot, as any other plan is
   * when it is found (PlannedFiles.scanned): called once its task failed, so that a plan the snapshot disagrees
   * with fails as a mismatch, whatever Spark or the commit made of it. Nothing to do for a scanned plan.
   */
  public void verify() throws IOException {
    if (planned.described()) {
      PlannedFiles.scanned(table, snapshot, work);
    }
  }

  /** Whether the planned files were taken as the plan describes them (PlannedFiles.find), not scanned. */
  public boolean described() {
    return planned.described();
  }

  Table table() {
    return table;
  }

  int groupCount() {
    return planned.groupCount();
  }

  /** File group `index` as the task's input describes it (lakewarden's FileGroupInput). */
  JsonNode groupInput(int index) {
    return work.path("groups").path(index);
  }

  /** The scan tasks of file group `index` whose files are rewritten, in the plan's order. */
  public List<FileScanTask> group(int index) {
    return planned.group(index);
  }

  /** The scan tasks of every group's files whose deletes become files of their own. */
  public List<FileScanTask> positionTasks() {
    return planned.positionTasks();
  }

  /** The planned data file's scan task. */
  public FileScanTask task(String path) {
    return planned.task(path);
  }

  /** The spec id of group `index`'s files (a group is one partition of one spec). */
  public int specId(int index) {
    return planned.group(index).get(0).spec().specId();
  }

  /** Group `index` was rewritten into `files`; returns their locations, as a JSON array. */
  public String rewrote(int index, Collection<DataFile> files) throws IOException {
    for (FileScanTask task : planned.group(index)) {
      rewritten.add(task.file());
    }
    written.addAll(files);
    writtenByGroup.computeIfAbsent(index, i -> new ArrayList<>()).addAll(files);
    ArrayNode locations = JSON.createArrayNode();
    for (DataFile file : files) {
      locations.add(file.location());
    }
    return JSON.writeValueAsString(locations);
  }

  /**
   * The position tasks' deletes were rewritten into `deletes`. For deletion vectors (format version 3) each
   * task's current vector is replaced, unless the plan removes it anyway.
   */
  public void rewrotePositions(Collection<DeleteFile> deletes, boolean vectors) {
    writtenDeletes.addAll(deletes);
    positionsRewritten += planned.positionTasks().size();
    vectorsWritten |= vectors;
    if (!vectors) {
      return;
    }
    Set<String> removing = new HashSet<>();
    for (DeleteFile delete : planned.removed().values()) {
      removing.add(identity(delete));
    }
    for (FileScanTask task : planned.positionTasks()) {
      for (DeleteFile delete : task.deletes()) {
        boolean vector = delete.format() == FileFormat.PUFFIN;
        if (vector
            && task.file().location().equals(delete.referencedDataFile())
            && !removing.contains(identity(delete))) {
          replaced.add(delete);
        }
      }
    }
  }

  /** Deletion vectors share a Puffin file, each at an offset of its own. */
  static String identity(DeleteFile delete) {
    return delete.location() + "@" + delete.contentOffset();
  }

  /** A delete file's own bytes: a deletion vector's within its Puffin file. */
  private static long deleteBytes(DeleteFile delete) {
    Long size = delete.contentSizeInBytes();
    return size != null ? size : delete.fileSizeInBytes();
  }

  /**
   * What the task wrote, uncommitted, for the process's one commit to take (lakewarden's StagedFiles): per file
   * group of the plan, the data files it was rewritten into, and the position deletes written, each as Iceberg's
   * ContentFileParser writes a content file.
   */
  public String staged() throws IOException {
    ObjectNode out = JSON.createObjectNode();
    ArrayNode byGroup = out.putArray("groups");
    for (int i = 0; i < planned.groupCount(); i++) {
      ArrayNode group = byGroup.addArray();
      for (DataFile file : writtenByGroup.getOrDefault(i, List.of())) {
        group.add(JSON.readTree(ContentFileParser.toJson(file, table.specs().get(file.specId()))));
      }
    }
    ArrayNode deletes = out.putArray("deletes");
    for (DeleteFile file : writtenDeletes) {
      deletes.add(JSON.readTree(ContentFileParser.toJson(file, table.specs().get(file.specId()))));
    }
    out.put("vectors", vectorsWritten);
    return JSON.writeValueAsString(out);
  }

  /**
   * The files the process's tasks staged (`stagedJson` as staged() writes it, their groups in this plan's order)
   * become this plan's written files: the process commits them at once.
   */
  public void restage(String stagedJson) throws IOException {
    JsonNode staged = JSON.readTree(stagedJson);
    JsonNode byGroup = staged.path("groups");
    if (byGroup.size() != planned.groupCount()) {
      throw new PlanMismatchException(
          "staged files for " + byGroup.size() + " file group(s), the plan has " + planned.groupCount());
    }
    for (int i = 0; i < planned.groupCount(); i++) {
      List<DataFile> group = new ArrayList<>();
      for (JsonNode file : byGroup.get(i)) {
        group.add((DataFile) contentFile(file));
      }
      if (!planned.group(i).isEmpty()) {
        rewrote(i, group);
      }
    }
    List<DeleteFile> deletes = new ArrayList<>();
    for (JsonNode file : staged.path("deletes")) {
      deletes.add((DeleteFile) contentFile(file));
    }
    if (!planned.positionTasks().isEmpty() || !deletes.isEmpty()) {
      rewrotePositions(deletes, staged.path("vectors").asBoolean(false));
    }
  }

  /** Iceberg's parser reads its own (shaded) Jackson trees: the file goes across as text. */
  private ContentFile<?> contentFile(JsonNode file) throws IOException {
    return ContentFileParser.fromJson(JsonUtil.mapper().readTree(file.toString()), table.specs());
  }

  /** Whether the task has anything to commit. */
  public boolean changes() {
    return !(rewritten.isEmpty() && removedDeletes.isEmpty() && writtenDeletes.isEmpty());
  }

  /**
   * One snapshot (Amoro's UnKeyedTableCommit): the rewritten data files and the removed delete files replaced
   * by the new files, validated from the planned snapshot, the new data files keeping its sequence number.
   * Iceberg's RewriteFiles cannot add delete files without removing one, so then the new position deletes go in
   * a RowDelta of the same transaction, which checks that the data files they name still exist. New deletion
   * vectors always go in the RowDelta with the vectors they replace: it also checks that no writer added a
   * vector for one of their data files meanwhile and that the replaced ones are still there. Both commit to
   * `branch` (null: main). When writers changed some groups' files since the planned snapshot, the other
   * groups commit alone (commitUntouched). Returns the snapshot id at the branch's head afterwards.
   */
  public Long commit(Map<String, String> properties, String branch) {
    if (!changes()) {
      return null;
    }
    try {
      commitOnce(properties, branch);
    } catch (ValidationException conflict) {
      commitUntouched(conflict, properties, branch);
    }
    Snapshot head = branch == null ? table.currentSnapshot() : table.snapshot(branch);
    return head == null ? null : head.snapshotId();
  }

  private void commitOnce(Map<String, String> properties, String branch) {
    boolean vectors = false;
    for (DeleteFile delete : writtenDeletes) {
      vectors |= delete.format() == FileFormat.PUFFIN;
    }
    boolean deletesInRewrite = !removedDeletes.isEmpty() && !vectors;
    long plannedId = snapshot.snapshotId();
    boolean rewrites = !rewritten.isEmpty() || !removedDeletes.isEmpty();
    boolean adds = !writtenDeletes.isEmpty() && !deletesInRewrite;
    // one operation commits alone, as Iceberg's own rewrite commits: a transaction would load the table again
    Transaction transaction = rewrites && adds ? table.newTransaction() : null;
    if (rewrites) {
      RewriteFiles rewrite =
          (transaction != null ? transaction.newRewrite() : table.newRewrite())
              .validateFromSnapshot(plannedId)
              .dataSequenceNumber(snapshot.sequenceNumber());
      if (branch != null) {
        rewrite = rewrite.toBranch(branch);
      }
      rewritten.forEach(rewrite::deleteFile);
      written.forEach(rewrite::addFile);
      removedDeletes.forEach(rewrite::deleteFile);
      if (deletesInRewrite) {
        writtenDeletes.forEach(rewrite::addFile);
      }
      properties.forEach(rewrite::set);
      rewrite.commit();
    }
    if (adds) {
      RowDelta delta =
          (transaction != null ? transaction.newRowDelta() : table.newRowDelta()).validateFromSnapshot(plannedId);
      if (branch != null) {
        delta = delta.toBranch(branch);
      }
      List<CharSequence> referenced = new ArrayList<>();
      for (DeleteFile delete : writtenDeletes) {
        delta = delta.addDeletes(delete);
        // a position-delete file names its one data file by the bounds of its path column
        String named = ContentFileUtil.referencedDataFileLocation(delete);
        if (named != null) {
          referenced.add(named);
        }
      }
      for (DeleteFile delete : replaced) {
        delta = delta.removeDeletes(delete);
      }
      if (!replaced.isEmpty()) {
        delta = delta.validateDeletedFiles();
      }
      delta = delta.validateDataFilesExist(referenced);
      properties.forEach(delta::set);
      delta.commit();
    }
    if (transaction != null) {
      transaction.commitTransaction();
    }
  }

  /**
   * The commit failed its validation because writers changed the table since the planned snapshot: the file
   * groups whose files they named (a position delete or deletion vector on one, its removal, the removal of a
   * delete file a group reads) are left out with everything they wrote and the delete files they read, and
   * the untouched groups commit alone, as Iceberg's partial progress does. The groups left out are planned
   * again on the new snapshot. Fails with the writer's conflict when every group is touched or the conflict
   * cannot be placed in a group.
   */
  private void commitUntouched(ValidationException conflict, Map<String, String> properties, String branch) {
    table.refresh();
    Snapshot head = branch == null ? table.currentSnapshot() : table.snapshot(branch);
    Map<String, Integer> groupOf = TouchedGroups.groupOf(planned, work);
    Set<Integer> touched = head == null ? null : TouchedGroups.find(table, snapshot, head, planned, groupOf);
    if (touched == null || touched.isEmpty()) {
      throw conflict;
    }
    Set<String> dropped = new HashSet<>(); // the touched groups' data files
    Set<String> readDeletes = new HashSet<>(); // the delete files they read
    for (Map.Entry<String, Integer> entry : groupOf.entrySet()) {
      if (touched.contains(entry.getValue())) {
        dropped.add(entry.getKey());
        planned.task(entry.getKey()).deletes().forEach(d -> readDeletes.add(identity(d)));
      }
    }
    for (int index : touched) {
      yieldedWritten.addAll(writtenByGroup.getOrDefault(index, List.of()));
      writtenByGroup.remove(index);
    }
    List<DeleteFile> yieldedDeletes = new ArrayList<>();
    for (DeleteFile delete : writtenDeletes) {
      if (dropped.contains(String.valueOf(ContentFileUtil.referencedDataFileLocation(delete)))) {
        yieldedDeletes.add(delete);
      }
    }
    rewritten.removeIf(f -> dropped.contains(f.location()));
    written.removeAll(yieldedWritten);
    writtenDeletes.removeAll(yieldedDeletes);
    yieldedWritten.addAll(yieldedDeletes);
    replaced.removeIf(d -> dropped.contains(String.valueOf(ContentFileUtil.referencedDataFileLocation(d))));
    removedDeletes.removeIf(d -> readDeletes.contains(identity(d)));
    positionsRewritten -= (int) planned.positionTasks().stream().filter(t -> dropped.contains(t.file().location())).count();
    yielded.addAll(touched);
    if (!changes()) {
      throw conflict;
    }
    commitOnce(properties, branch);
    Set<String> kept = new HashSet<>(); // a deletion vector's Puffin file may hold vectors that were committed
    writtenDeletes.forEach(d -> kept.add(d.location()));
    for (ContentFile<?> file : yieldedWritten) {
      if (kept.add(file.location())) {
        table.io().deleteFile(file.location());
      }
    }
    yieldedWritten.clear();
  }

  /** The file groups left out of the commit (commitUntouched), as a JSON array of their indexes. */
  public String yieldedGroups() throws IOException {
    return JSON.writeValueAsString(yielded);
  }

  /** Deletes every file the task wrote (a task that does not commit leaves nothing behind). */
  public void deleteWritten() {
    for (ContentFile<?> file : written) {
      table.io().deleteFile(file.location());
    }
    for (ContentFile<?> file : yieldedWritten) {
      table.io().deleteFile(file.location());
    }
    for (ContentFile<?> file : writtenDeletes) {
      table.io().deleteFile(file.location());
    }
  }

  /**
   * The task's counts and sizes, and up to `listed` sorted paths of each kind of file, as a JSON object whose
   * fields are OptimizingResult's.
   */
  public String summary(int listed) {
    ObjectNode out = JSON.createObjectNode();
    out.put("files_in", rewritten.size());
    out.put("bytes_in", rewritten.stream().mapToLong(DataFile::fileSizeInBytes).sum());
    out.put("files_out", written.size());
    out.put("bytes_out", written.stream().mapToLong(DataFile::fileSizeInBytes).sum());
    out.put("rewrite_pos_files", positionsRewritten);
    out.put("delete_files_removed", removedDeletes.size() + replaced.size());
    long removedBytes = 0;
    for (DeleteFile delete : removedDeletes) {
      removedBytes += deleteBytes(delete);
    }
    for (DeleteFile delete : replaced) {
      removedBytes += deleteBytes(delete);
    }
    out.put("delete_bytes_removed", removedBytes);
    out.put("delete_files_added", writtenDeletes.size());
    out.put("delete_bytes_added", writtenDeletes.stream().mapToLong(PlannedRewrite::deleteBytes).sum());
    out.set("rewritten_files", paths(rewritten, listed));
    out.set("added_files", paths(written, listed));
    ArrayNode removedPaths = JSON.createArrayNode();
    removedDeletes.stream().map(DeleteFile::location).distinct().sorted().limit(listed).forEach(removedPaths::add);
    out.set("removed_delete_files", removedPaths);
    out.set("added_delete_files", paths(writtenDeletes, listed));
    try {
      return JSON.writeValueAsString(out);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static ArrayNode paths(List<? extends ContentFile<?>> files, int listed) {
    ArrayNode out = JSON.createArrayNode();
    TreeSet<String> sorted = new TreeSet<>();
    for (ContentFile<?> file : files) {
      sorted.add(file.location());
    }
    sorted.stream().limit(listed).forEach(out::add);
    return out;
  }
}
