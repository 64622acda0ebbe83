/// Where an ``ArchiveOutput`` sends the archive's bytes instead of its file: a consumer that
/// must know which bytes are final (an encrypted package's payload seals each 16 KiB as soon as
/// nothing will change it).
///
/// libzip writes an archive front to back, except that after each entry's data it seeks back
/// and rewrites the entry's local header (its CRC and sizes), then returns to the end. So the
/// bytes written since the last return to the end may be rewritten once, and only those from
/// where that return was: the next local header (or the central directory) starts there.
package protocol ArchiveSink: AnyObject {
    /// `bytes` at `offset`: appended at the end, or rewritten behind it.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws
    /// libzip is at the end, `offset`, again (or starts there): everything before the last such
    /// point is final, and the next entry's local header starts at `offset`.
    func resumed(at offset: UInt64) throws
}
