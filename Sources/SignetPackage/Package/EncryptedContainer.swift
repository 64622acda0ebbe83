internal import CSignetZlib
import SignetCore

/// The zip around an encrypted package's payload when `pack --encrypt-to` seals as it writes
/// (``SealingOutput``): libzip cannot write an entry whose bytes become final out of order, so
/// this one fixed layout of two stored entries is written here, and read back through the same
/// checks as any package before it is kept. The payload's records are ZIP64 (local header and
/// central directory), so its size needs no room decided before it is known; the envelope's
/// offset and the directory's are ZIP64 too, so that one layout serves every size.
struct EncryptedContainer {
    let payloadSize: UInt64
    let payloadCRC: UInt32
    let envelope: [UInt8]

    /// Unix, APPNOTE 4.5 (ZIP64); stored; 1980-01-01 00:00 as Signet's entries are dated; 0644.
    private static let madeBy: UInt16 = 3 << 8 | 45
    private static let needed: UInt16 = 45
    private static let dosDate: UInt16 = 0x0021
    private static let attributes: UInt32 = 0o100644 << 16
    private static let payloadName = Array(EncryptedPackage.payloadName.utf8)
    private static let envelopeName = Array(EncryptedPackage.envelopeName.utf8)

    /// The payload's local header: 30 bytes, its name, a ZIP64 extra field with both sizes.
    var payloadLocalHeader: [UInt8] {
        var bytes = Bytes()
        bytes.u32(0x0403_4b50)
        bytes.u16(Self.needed)
        bytes.u16(0) // flags
        bytes.u16(0) // stored
        bytes.u16(0)
        bytes.u16(Self.dosDate)
        bytes.u32(payloadCRC)
        bytes.u32(0xffff_ffff)
        bytes.u32(0xffff_ffff)
        bytes.u16(UInt16(Self.payloadName.count))
        bytes.u16(20)
        bytes.append(Self.payloadName)
        bytes.u16(1)
        bytes.u16(16)
        bytes.u64(payloadSize)
        bytes.u64(payloadSize)
        return bytes.value
    }

    /// Everything after the payload: the envelope's entry, the central directory, the ZIP64
    /// end record and its locator, the end record.
    var trailer: [UInt8] {
        let headerSize = UInt64(payloadLocalHeader.count)
        let envelopeOffset = headerSize + payloadSize
        let envelopeCRC = UInt32(truncatingIfNeeded: signet_crc32(0, envelope, envelope.count))
        var bytes = Bytes()
        // The envelope's local header and bytes.
        bytes.u32(0x0403_4b50)
        bytes.u16(20)
        bytes.u16(0)
        bytes.u16(0)
        bytes.u16(0)
        bytes.u16(Self.dosDate)
        bytes.u32(envelopeCRC)
        bytes.u32(UInt32(envelope.count))
        bytes.u32(UInt32(envelope.count))
        bytes.u16(UInt16(Self.envelopeName.count))
        bytes.u16(0)
        bytes.append(Self.envelopeName)
        bytes.append(envelope)
        let directoryOffset = envelopeOffset + UInt64(bytes.value.count)
        let directoryStart = bytes.value.count
        // The central directory: the payload (ZIP64 sizes), then the envelope (ZIP64 offset).
        central(&bytes, crc: payloadCRC, size: 0xffff_ffff, name: Self.payloadName, offset: 0, extra: [payloadSize, payloadSize])
        central(&bytes, crc: envelopeCRC, size: UInt32(envelope.count), name: Self.envelopeName, offset: 0xffff_ffff, extra: [envelopeOffset])
        let directorySize = UInt64(bytes.value.count - directoryStart)
        let zip64End = directoryOffset + directorySize
        // ZIP64 end record (44 bytes after its first 12) and locator.
        bytes.u32(0x0606_4b50)
        bytes.u64(44)
        bytes.u16(Self.madeBy)
        bytes.u16(Self.needed)
        bytes.u32(0)
        bytes.u32(0)
        bytes.u64(2)
        bytes.u64(2)
        bytes.u64(directorySize)
        bytes.u64(directoryOffset)
        bytes.u32(0x0706_4b50)
        bytes.u32(0)
        bytes.u64(zip64End)
        bytes.u32(1)
        // The end record: the directory's offset in the ZIP64 record.
        bytes.u32(0x0605_4b50)
        bytes.u16(0)
        bytes.u16(0)
        bytes.u16(2)
        bytes.u16(2)
        bytes.u32(UInt32(directorySize))
        bytes.u32(0xffff_ffff)
        bytes.u16(0)
        return bytes.value
    }

    private func central(_ bytes: inout Bytes, crc: UInt32, size: UInt32, name: [UInt8], offset: UInt32, extra: [UInt64]) {
        bytes.u32(0x0201_4b50)
        bytes.u16(Self.madeBy)
        bytes.u16(Self.needed)
        bytes.u16(0)
        bytes.u16(0)
        bytes.u16(0)
        bytes.u16(Self.dosDate)
        bytes.u32(crc)
        bytes.u32(size)
        bytes.u32(size)
        bytes.u16(UInt16(name.count))
        bytes.u16(UInt16(4 + 8 * extra.count))
        bytes.u16(0) // comment
        bytes.u16(0) // disk
        bytes.u16(0) // internal attributes
        bytes.u32(Self.attributes)
        bytes.u32(offset)
        bytes.append(name)
        bytes.u16(1)
        bytes.u16(UInt16(8 * extra.count))
        for value in extra { bytes.u64(value) }
    }

    /// Little-endian fields, appended.
    private struct Bytes {
        var value: [UInt8] = []
        mutating func u16(_ v: UInt16) { value += [UInt8(v & 0xff), UInt8(v >> 8)] }
        mutating func u32(_ v: UInt32) { for shift in stride(from: 0, to: 32, by: 8) { value.append(UInt8(truncatingIfNeeded: v >> UInt32(shift))) } }
        mutating func u64(_ v: UInt64) { for shift in stride(from: 0, to: 64, by: 8) { value.append(UInt8(truncatingIfNeeded: v >> UInt64(shift))) } }
        mutating func append(_ bytes: [UInt8]) { value += bytes }
    }
}
